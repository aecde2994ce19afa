package conditions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const (
	netlinkInitialBuffer = 256 << 10
	netlinkMaxBuffer     = 8 << 20
	// netlinkReadBuffer is what one read takes from the socket. The probe
	// only needs to know that something changed, not what: a longer
	// message is truncated by the kernel and its rest dropped, which is
	// fine.
	netlinkReadBuffer = 4 << 10
)

// netlinkGroups is the bind mask of the rtnetlink multicast groups whose
// messages wake the probe: links, IPv4 and IPv6 addresses, IPv4 and IPv6
// routes (group n is bit n-1).
const netlinkGroups = 1<<(unix.RTNLGRP_LINK-1) | 1<<(unix.RTNLGRP_IPV4_IFADDR-1) | 1<<(unix.RTNLGRP_IPV6_IFADDR-1) |
	1<<(unix.RTNLGRP_IPV4_ROUTE-1) | 1<<(unix.RTNLGRP_IPV6_ROUTE-1)

// Watch wakes the probe on every link, address and route change, through
// one netlink socket bound to the five multicast groups and read through
// the runtime's poller. It does not decode the messages: a wake-up makes
// the probe sample the whole state, so one read drains every queued
// message and wakes it once.
//
// Why not the netlink library's three subscriptions, as before: each held
// two goroutines and a 64 KiB receive buffer in the agent's memory (#21,
// docs/benchmarks.md), to deliver decoded updates nobody read.
//
// An overflow (ENOBUFS: the kernel dropped messages after a burst) loses
// nothing here, since the wake-up samples everything; the buffer is doubled
// up to netlinkMaxBuffer so that a repeated burst overflows less. Any other
// receive error re-opens the socket.
func (p *NetworkProbe) Watch(ctx context.Context, wake chan<- struct{}) error {
	buffer := p.initialBuffer
	sock, err := p.subscribe(buffer)
	if err != nil {
		return err
	}
	defer func() { sock.close() }()
	stop := context.AfterFunc(ctx, sock.close)
	wakeUp(wake) // a full sample, whatever changed before the socket existed
	for {
		err := sock.wait()
		if ctx.Err() != nil {
			return nil
		}
		wakeUp(wake)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.ENOBUFS):
			buffer = min(buffer*2, netlinkMaxBuffer)
			p.overflows.Add(1)
			p.metrics.overflows.Inc()
			if err := p.setReceiveBuffer(sock.fd, buffer); err != nil {
				slog.Warn("netlink: cannot enlarge the receive buffer after an overflow", "probe", p.Name(), "buffer", buffer, "err", err)
			}
			continue
		}
		slog.Info("netlink receive failed; re-opening the socket", "probe", p.Name(), "err", err)
		stop()
		sock.close()
		p.resubscribes.Add(1)
		p.metrics.resubscribes.Inc()
		if sock, err = p.resubscribe(ctx, buffer); err != nil {
			return err
		}
		if sock == nil {
			return nil
		}
		stop = context.AfterFunc(ctx, sock.close)
		wakeUp(wake)
	}
}

// resubscribe retries until it succeeds or ctx ends (nil, nil); a netlink
// socket can fail to open under memory pressure, which is no reason to stop
// watching.
func (p *NetworkProbe) resubscribe(ctx context.Context, buffer int) (*eventSocket, error) {
	for {
		sock, err := p.subscribe(buffer)
		if err == nil {
			return sock, nil
		}
		slog.Warn("netlink resubscribe failed; relying on the relist until it works", "err", err)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(p.Interval()):
		}
	}
}

// eventSocket is a non-blocking rtnetlink socket bound to netlinkGroups,
// registered with the runtime's poller through an os.File. fd is kept
// apart because os.File.Fd would put the socket back into blocking mode.
type eventSocket struct {
	fd   int
	file *os.File
	conn syscall.RawConn
	buf  []byte
}

// newEventSocket wraps a non-blocking socket; the eventSocket owns fd from
// then on, also when it fails.
func newEventSocket(fd int, name string) (*eventSocket, error) {
	file := os.NewFile(uintptr(fd), name)
	conn, err := file.SyscallConn()
	if err != nil {
		_ = file.Close()
		return nil, fmt.Errorf("register %s with the poller: %w", name, err)
	}
	return &eventSocket{fd: fd, file: file, conn: conn, buf: make([]byte, netlinkReadBuffer)}, nil
}

// netlinkBatch bounds the messages one wait reads: under a steady stream
// of changes (a flapping link, a routing daemon's churn) the socket might
// never run empty, and the probe must still be woken.
const netlinkBatch = 256

// wait blocks until at least one message arrived, then reads every queued
// one, netlinkBatch at most. It returns the receive error, if any (ENOBUFS
// after an overflow), or the poller's when the socket was closed.
func (s *eventSocket) wait() error {
	received := 0
	var recvErr error
	err := s.conn.Read(func(fd uintptr) bool {
		for {
			_, _, recvErr = unix.Recvfrom(int(fd), s.buf, unix.MSG_DONTWAIT)
			switch recvErr {
			case nil:
				if received++; received >= netlinkBatch {
					return true
				}
			case unix.EINTR:
			case unix.EAGAIN:
				recvErr = nil
				return received > 0 // nothing yet: wait for the poller
			default:
				return true
			}
		}
	})
	if recvErr != nil {
		return recvErr
	}
	return err
}

// close closes the socket; a wait in progress returns. It may be called
// more than once.
func (s *eventSocket) close() { _ = s.file.Close() }

// subscribe opens the event socket. As root it forces the receive buffer
// (SO_RCVBUFFORCE, past net.core.rmem_max), which needs CAP_NET_ADMIN.
// Where that is not permitted — a DaemonSet that drops the capability, a
// hardened unit — it falls back to an ordinary buffer (net.core.rmem_max at
// most): events still arrive, and an overflow costs only a full sample.
func (p *NetworkProbe) subscribe(buffer int) (*eventSocket, error) {
	fd, err := p.openEventSocket()
	if err != nil {
		return nil, err
	}
	if err := p.setReceiveBuffer(fd, buffer); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return newEventSocket(fd, "netlink-route-events")
}

// openEventSocket opens the non-blocking socket in the probe's network
// namespace and binds it to the groups.
func (p *NetworkProbe) openEventSocket() (int, error) {
	open := func() (int, error) {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
		if err != nil {
			return -1, fmt.Errorf("open netlink event socket: %w", err)
		}
		addr := &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: netlinkGroups}
		if err := unix.Bind(fd, addr); err != nil {
			_ = unix.Close(fd)
			return -1, fmt.Errorf("subscribe to link, address and route changes: %w", err)
		}
		return fd, nil
	}
	if !p.ns.IsOpen() {
		return open()
	}
	// A socket belongs to the namespace of the thread that opened it, and
	// keeps it: open it on a thread of its own that enters the namespace
	// and is never unlocked, so the thread ends with the goroutine and no
	// other goroutine runs in the wrong namespace.
	type opened struct {
		fd  int
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(p.ns); err != nil {
			ch <- opened{-1, fmt.Errorf("enter network namespace for the netlink event socket: %w", err)}
			return
		}
		fd, err := open()
		ch <- opened{fd, err}
	}()
	o := <-ch
	return o.fd, o.err
}

// setReceiveBuffer sizes the socket's receive buffer: forced as root unless
// that was refused once (no CAP_NET_ADMIN), else the ordinary option.
func (p *NetworkProbe) setReceiveBuffer(fd, size int) error {
	if os.Geteuid() == 0 && !p.unprivileged.Load() {
		err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("set the netlink receive buffer to %d bytes: %w", size, err)
		}
		p.unprivileged.Store(true)
		slog.Info("netlink: no CAP_NET_ADMIN to force the receive buffer; using an ordinary buffer",
			"probe", p.Name(), "buffer", size)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, size); err != nil {
		return fmt.Errorf("set the netlink receive buffer to %d bytes: %w", size, err)
	}
	return nil
}
