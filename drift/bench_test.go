package drift

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/nodeward/nodeward/machineconfig"
)

// benchIgn is a config the size of a rendered worker config: 100 files of
// 1 KiB in 10 directories, plus 10 units with a drop-in each.
func benchIgn() string {
	var files, units []string
	for i := range 100 {
		files = append(files, fmt.Sprintf(`{"path":"/etc/bench/d%d/f%d.conf","contents":{"source":"data:,%s"}}`,
			i%10, i, strings.Repeat("x", 1024)))
	}
	for i := range 10 {
		units = append(units, fmt.Sprintf(`{"name":"u%d.service","contents":"[Service]\nExecStart=/bin/true\n",
			"dropins":[{"name":"10-x.conf","contents":"[Service]\nNice=1\n"}]}`, i))
	}
	return `{"ignition":{"version":"3.4.0"},"storage":{"files":[` + strings.Join(files, ",") +
		`]},"systemd":{"units":[` + strings.Join(units, ",") + `]}}`
}

// BenchmarkRecheck is one full re-check of the Monitor for a config of
// 100 files and 10 units with drop-ins (120 paths, 21 directories): list
// the paths, re-arm the watches, compare every path.
func BenchmarkRecheck(b *testing.B) {
	cfg := parse(b, "rendered-bench", benchIgn())
	w := machineconfig.Writer{Root: b.TempDir(), StateDir: b.TempDir()}
	if err := w.Apply(context.Background(), nil, cfg); err != nil {
		b.Fatal(err)
	}
	m, err := New(Options{Checker: w, Config: cfg, OnReport: func(context.Context, Report) { b.Fatal("drift") },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	in, err := newInotify()
	if err != nil {
		b.Fatal(err)
	}
	defer in.close()
	r := &run{m: m, in: in}
	ctx := context.Background()
	for b.Loop() {
		if err := r.check(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(r.targets.dirs)), "dirs")
}

// BenchmarkDrift is Writer.Drift alone on the same config: the comparison
// without listing the paths and re-arming the watches.
func BenchmarkDrift(b *testing.B) {
	cfg := parse(b, "rendered-bench", benchIgn())
	w := machineconfig.Writer{Root: b.TempDir(), StateDir: b.TempDir()}
	if err := w.Apply(context.Background(), nil, cfg); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if d, err := w.Drift(cfg); d != nil || err != nil {
			b.Fatal(d, err)
		}
	}
}
