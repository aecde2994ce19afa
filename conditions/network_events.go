package conditions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

const (
	netlinkInitialBuffer = 256 << 10
	netlinkMaxBuffer     = 8 << 20
)

// Watch subscribes to link, address and route changes and wakes the probe
// on each. A subscription channel closes on any receive error (ENOBUFS
// after a burst included); the set is then re-opened with ListExisting, so
// nothing changed meanwhile is missed, and a larger buffer.
func (p *NetworkProbe) Watch(ctx context.Context, wake chan<- struct{}) error {
	buffer := p.initialBuffer
	sub, err := p.subscribe(buffer)
	if err != nil {
		return err
	}
	defer func() { sub.close() }()
	wakeUp(wake) // a full sample, whether or not the subscription listed
	for {
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case _, ok = <-sub.links:
		case _, ok = <-sub.addrs:
		case _, ok = <-sub.routes:
		}
		wakeUp(wake)
		if ok {
			continue
		}
		// One channel closed: replace all three, so that no
		// subscription is left half-alive.
		sub.close()
		buffer = min(buffer*2, netlinkMaxBuffer)
		p.resubscribes.Add(1)
		p.metrics.resubscribes.Inc()
		slog.Info("netlink subscription closed; resubscribing", "probe", p.Name(), "receiveBuffer", buffer)
		if sub, err = p.resubscribe(ctx, buffer); err != nil {
			return err
		}
		if sub == nil {
			return nil
		}
		wakeUp(wake)
	}
}

// resubscribe retries until it succeeds or ctx ends (nil, nil); a netlink
// socket can fail to open under memory pressure, which is no reason to stop
// watching.
func (p *NetworkProbe) resubscribe(ctx context.Context, buffer int) (*subscription, error) {
	for {
		sub, err := p.subscribe(buffer)
		if err == nil {
			return sub, nil
		}
		slog.Warn("netlink resubscribe failed; relying on the relist until it works", "err", err)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(p.Interval()):
		}
	}
}

type subscription struct {
	done   chan struct{}
	links  chan netlink.LinkUpdate
	addrs  chan netlink.AddrUpdate
	routes chan netlink.RouteUpdate
}

// close stops the receivers and drains what they still hold so that none
// stays blocked on a send.
func (s *subscription) close() {
	if s == nil {
		return
	}
	close(s.done)
	go func() {
		for range s.links {
		}
	}()
	go func() {
		for range s.addrs {
		}
	}()
	go func() {
		for range s.routes {
		}
	}()
}

// subscribe opens the link, address and route subscriptions. As root it
// forces the receive buffer (SO_RCVBUFFORCE, past net.core.rmem_max) and
// asks for the existing objects (ListExisting), both of which need
// CAP_NET_ADMIN (the library sends the dump request to the subscription's
// multicast groups). Where that is not permitted — a DaemonSet that drops
// the capability, a hardened unit — it falls back to an ordinary buffer
// without the listing: events are still delivered, and Watch wakes the
// probe after every (re)subscription, so a full sample takes the listing's
// place.
func (p *NetworkProbe) subscribe(buffer int) (*subscription, error) {
	privileged := os.Geteuid() == 0 && !p.unprivileged.Load()
	sub, err := p.subscribeWith(buffer, privileged)
	if err != nil && privileged && errors.Is(err, syscall.EPERM) {
		p.unprivileged.Store(true)
		slog.Info("netlink: no CAP_NET_ADMIN to force the receive buffer; subscribing with an ordinary buffer",
			"probe", p.Name(), "buffer", buffer)
		return p.subscribeWith(buffer, false)
	}
	return sub, err
}

func (p *NetworkProbe) subscribeWith(buffer int, privileged bool) (*subscription, error) {
	force, listExisting := privileged, privileged
	sub := &subscription{
		done:   make(chan struct{}),
		links:  make(chan netlink.LinkUpdate, 64),
		addrs:  make(chan netlink.AddrUpdate, 64),
		routes: make(chan netlink.RouteUpdate, 64),
	}
	var ns *netns.NsHandle
	if p.ns.IsOpen() {
		ns = &p.ns
	}
	onError := func(err error) { slog.Debug("netlink receive error", "probe", p.Name(), "err", err) }
	subscribed := 0
	fail := func(what string, err error) (*subscription, error) {
		// Channels never handed to netlink are closed here, the others by
		// their receivers once done closes.
		unsubscribed := []func(){func() { close(sub.links) }, func() { close(sub.addrs) }, func() { close(sub.routes) }}
		for _, closeChannel := range unsubscribed[subscribed:] {
			closeChannel()
		}
		sub.close()
		return nil, fmt.Errorf("subscribe to %s changes: %w", what, err)
	}
	if err := netlink.LinkSubscribeWithOptions(sub.links, sub.done, netlink.LinkSubscribeOptions{
		Namespace: ns, ListExisting: listExisting, ReceiveBufferSize: buffer, ReceiveBufferForceSize: force, ErrorCallback: onError,
	}); err != nil {
		return fail("link", err)
	}
	subscribed++
	if err := netlink.AddrSubscribeWithOptions(sub.addrs, sub.done, netlink.AddrSubscribeOptions{
		Namespace: ns, ListExisting: listExisting, ReceiveBufferSize: buffer, ReceiveBufferForceSize: force, ErrorCallback: onError,
	}); err != nil {
		return fail("address", err)
	}
	subscribed++
	if err := netlink.RouteSubscribeWithOptions(sub.routes, sub.done, netlink.RouteSubscribeOptions{
		Namespace: ns, ListExisting: listExisting, ReceiveBufferSize: buffer, ReceiveBufferForceSize: force, ErrorCallback: onError,
	}); err != nil {
		return fail("route", err)
	}
	return sub, nil
}
