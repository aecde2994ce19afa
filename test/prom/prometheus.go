package prom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/testenv"
)

// PrometheusOptions say what a Prometheus scrapes and evaluates.
type PrometheusOptions struct {
	// Targets are the host:port pairs scraped at /metrics, in one job
	// named "nodeward-test". StartPrometheus returns once each has been
	// scraped (up or not).
	Targets []string
	// Jobs are further scrape jobs, each target with its own labels, as a
	// ServiceMonitor's relabelling gives them (job="nodeward-agent" with
	// node=<name>): what the shipped alerts and dashboards select on.
	// StartPrometheus waits for their first scrape too.
	Jobs []ScrapeJob
	// Rules is the YAML of a rule file (groups: ...); empty: no rules.
	Rules string
	// ScrapeInterval and EvaluationInterval default to 1s, so that a
	// sample set on a Target reaches a query or an alert within seconds.
	ScrapeInterval, EvaluationInterval time.Duration
}

// ScrapeJob is a scrape job of labelled targets.
type ScrapeJob struct {
	Name    string
	Targets []LabelledTarget
}

// LabelledTarget is a host:port scraped at /metrics with extra labels.
type LabelledTarget struct {
	Addr   string
	Labels map[string]string
}

// targets counts the targets of every job.
func (o PrometheusOptions) targets() int {
	n := len(o.Targets)
	for _, j := range o.Jobs {
		n += len(j.Targets)
	}
	return n
}

// Prometheus is a real Prometheus server on the loopback.
type Prometheus struct {
	// URL is the base URL of its HTTP API, http://127.0.0.1:<port>.
	URL string
	api promv1.API
	// log is the server's output, read when it fails to start.
	log string
}

// job is the scrape job of the Targets.
const job = "nodeward-test"

// startTimeout bounds the start of a Prometheus: it is ready in well under
// a second on an idle machine, much more on a loaded CI runner.
const startTimeout = 30 * time.Second

// StartPrometheus starts /usr/bin/prometheus (found on PATH) with opts,
// its configuration and its TSDB in t's temporary directory, and waits
// until it is ready; t's cleanup stops it.
func StartPrometheus(t testing.TB, opts PrometheusOptions) *Prometheus {
	t.Helper()
	binary := testenv.RequireBinary(t, "prometheus")
	p, stop, err := Run(binary, t.TempDir(), opts)
	if err != nil {
		t.Fatalf("start Prometheus: %v", err)
	}
	t.Cleanup(stop)
	return p
}

// Run is StartPrometheus outside a test (the benchmarks' programs): binary
// is the prometheus executable, dir holds its configuration, TSDB and log.
// stop ends it.
func Run(binary, dir string, opts PrometheusOptions) (*Prometheus, func(), error) {
	config, err := writeConfig(dir, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("write the Prometheus configuration: %w", err)
	}
	p := &Prometheus{}
	s := server{name: "prometheus", binary: binary, dir: dir, args: func(addr, data string) []string {
		return []string{"--config.file=" + config, "--storage.tsdb.path=" + data, "--web.listen-address=" + addr,
			// Quiet: only what goes wrong reaches the log.
			"--log.level=warn",
			// Nothing outlives the test; nothing needs keeping long.
			"--storage.tsdb.retention.time=1h"}
	}}
	proc, _, logPath, err := serve(s, func(ctx context.Context, base string, proc *cluster.Process) error {
		client, err := api.NewClient(api.Config{Address: base})
		if err != nil {
			return err
		}
		p.URL, p.api = base, promv1.NewAPI(client)
		return p.waitReady(ctx, proc, opts.targets())
	})
	if err != nil {
		return nil, nil, err
	}
	p.log = logPath
	return p, func() { proc.Stop(10 * time.Second) }, nil
}

// waitReady waits until Prometheus answers /-/ready and has scraped each
// of its targets once.
func (p *Prometheus) waitReady(ctx context.Context, proc *cluster.Process, targets int) error {
	err := cluster.Poll(ctx, "Prometheus ready at "+p.URL+"/-/ready", 50*time.Millisecond, []*cluster.Process{proc},
		func(ctx context.Context) (bool, error) { return ready(ctx, p.URL) })
	if err != nil || targets == 0 {
		return err
	}
	// Prometheus hands discovered targets to its scrapers on a 5s tick, so
	// the first scrape comes seconds after /-/ready; a test should not
	// have to know.
	expr := "count(up)"
	return cluster.Poll(ctx, "a first scrape of every target", 100*time.Millisecond, []*cluster.Process{proc},
		func(ctx context.Context) (bool, error) {
			got, err := p.Value(ctx, expr)
			return err == nil && got == float64(targets), err
		})
}

func ready(ctx context.Context, base string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/-/ready", nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("/-/ready: %s", resp.Status)
	}
	return true, nil
}

// writeConfig writes prometheus.yml, and rules.yml when there are rules,
// into dir. The configuration is JSON, which is YAML too.
func writeConfig(dir string, opts PrometheusOptions) (string, error) {
	scrape, eval := opts.ScrapeInterval, opts.EvaluationInterval
	if scrape <= 0 {
		scrape = time.Second
	}
	if eval <= 0 {
		eval = time.Second
	}
	// Prometheus durations take whole units only: 1500ms, not 1.5s.
	ms := func(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
	config := map[string]any{
		"global": map[string]any{
			"scrape_interval":     ms(scrape),
			"scrape_timeout":      ms(scrape),
			"evaluation_interval": ms(eval),
		},
	}
	var jobs []any
	if len(opts.Targets) > 0 {
		jobs = append(jobs, map[string]any{
			"job_name":       job,
			"static_configs": []any{map[string]any{"targets": opts.Targets}},
		})
	}
	for _, j := range opts.Jobs {
		var static []any
		for _, tg := range j.Targets {
			static = append(static, map[string]any{"targets": []string{tg.Addr}, "labels": tg.Labels})
		}
		jobs = append(jobs, map[string]any{"job_name": j.Name, "static_configs": static})
	}
	if len(jobs) > 0 {
		config["scrape_configs"] = jobs
	}
	if opts.Rules != "" {
		rules := filepath.Join(dir, "rules.yml")
		if err := os.WriteFile(rules, []byte(opts.Rules), 0o644); err != nil {
			return "", err
		}
		config["rule_files"] = []string{rules}
	}
	data, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "prometheus.yml")
	return path, os.WriteFile(path, data, 0o644)
}

// tail is the end of a log, for a failure message.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	const max = 4000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return fmt.Sprintf("--- %s ---\n%s", path, strings.TrimSpace(string(data)))
}

// API is a client of the server's HTTP API.
func (p *Prometheus) API() promv1.API { return p.api }

// WaitAlert waits until the alert named name is in state ("firing",
// "pending", or "inactive" for no such alert active).
func (p *Prometheus) WaitAlert(t testing.TB, name string, state promv1.AlertState, timeout time.Duration) {
	t.Helper()
	p.wait(t, fmt.Sprintf("alert %s %s", name, state), timeout, func(ctx context.Context) (bool, error) {
		res, err := p.api.Alerts(ctx)
		if err != nil {
			return false, err
		}
		got := promv1.AlertStateInactive
		for _, a := range res.Alerts {
			if string(a.Labels[model.AlertNameLabel]) == name {
				got = a.State
			}
		}
		if got != state {
			return false, fmt.Errorf("alert %s is %s", name, got)
		}
		return true, nil
	})
}

// WaitValue waits until the instant query expr returns a single sample
// (or a scalar) of value want: until Prometheus has scraped what a Target
// was set to.
func (p *Prometheus) WaitValue(t testing.TB, expr string, want float64, timeout time.Duration) {
	t.Helper()
	p.wait(t, fmt.Sprintf("%s == %g", expr, want), timeout, func(ctx context.Context) (bool, error) {
		got, err := p.Value(ctx, expr)
		if err != nil {
			return false, err
		}
		if got != want {
			return false, fmt.Errorf("value %v", got)
		}
		return true, nil
	})
}

// Value is the one sample (or the scalar) the instant query expr returns.
func (p *Prometheus) Value(ctx context.Context, expr string) (float64, error) {
	v, _, _, err := p.api.Query(ctx, expr, time.Time{})
	if err != nil {
		return 0, err
	}
	switch v := v.(type) {
	case model.Vector:
		if len(v) != 1 {
			return 0, fmt.Errorf("%s: %d samples: %v", expr, len(v), v)
		}
		return float64(v[0].Value), nil
	case *model.Scalar:
		return float64(v.Value), nil
	default:
		return 0, fmt.Errorf("%s: result %v", expr, v)
	}
}

// WaitEmpty waits until the instant query expr returns no sample.
func (p *Prometheus) WaitEmpty(t testing.TB, expr string, timeout time.Duration) {
	t.Helper()
	p.wait(t, expr+" empty", timeout, func(ctx context.Context) (bool, error) {
		v, _, _, err := p.api.Query(ctx, expr, time.Time{})
		if err != nil {
			return false, err
		}
		if vec, ok := v.(model.Vector); !ok || len(vec) != 0 {
			return false, fmt.Errorf("result %v", v)
		}
		return true, nil
	})
}

func (p *Prometheus) wait(t testing.TB, what string, timeout time.Duration, check func(context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := cluster.Poll(ctx, what, 100*time.Millisecond, nil, check); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w\n%s", err, tail(p.log))
		}
		t.Fatal(err)
	}
}
