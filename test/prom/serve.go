package prom

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/nodeward/nodeward/test/cluster"
)

// server says how serve runs one of the servers: its name, and its
// arguments for a listen address and a per-attempt data directory.
type server struct {
	name   string
	binary string
	dir    string
	args   func(addr, data string) []string
}

// serve starts s on a free loopback port and waits until ready (given the
// base URL) passes. A port that someone else takes between FreePorts and
// the server's bind makes the server exit: serve then tries another port,
// three times in all. It returns the running process, its base URL and
// its log.
func serve(s server, ready func(ctx context.Context, base string, proc *cluster.Process) error) (*cluster.Process, string, string, error) {
	var last error
	for attempt := range 3 {
		ports, err := cluster.FreePorts(1)
		if err != nil {
			return nil, "", "", err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		logPath := filepath.Join(s.dir, fmt.Sprintf("%s-%d.log", s.name, attempt))
		data := filepath.Join(s.dir, fmt.Sprintf("data-%d", attempt))
		proc, err := cluster.Launch(s.name, s.binary, logPath, cluster.LaunchOptions{}, s.args(addr, data)...)
		if err != nil {
			return nil, "", "", err
		}
		base := "http://" + addr
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		err = ready(ctx, base, proc)
		cancel()
		if err == nil {
			return proc, base, logPath, nil
		}
		last = fmt.Errorf("start %s: %w\n%s", s.name, err, tail(logPath))
		if gone, _ := proc.Exited(); !gone {
			// Running but never ready: another port would not help.
			proc.Stop(10 * time.Second)
			break
		}
	}
	return nil, "", "", last
}
