package conditions

import (
	"context"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// TestProbeConditionsAreTheHealthConditions: the probe list and the API's
// list of health conditions (shared with the coordinator) agree, in order.
func TestProbeConditionsAreTheHealthConditions(t *testing.T) {
	t.Parallel()
	type row struct {
		kind      string
		condition corev1.NodeConditionType
	}
	cfg := DefaultConfig()
	var conds []corev1.NodeConditionType
	var rows []row // of the kinds enabled by default
	for _, k := range probeKinds {
		for _, c := range k.conditions {
			conds = append(conds, c.condition)
			if k.section(&cfg).enabled() {
				rows = append(rows, row{k.name, c.condition})
			}
		}
	}
	if want := v1alpha1.HealthConditions(); !slices.Equal(conds, want) {
		t.Errorf("probe conditions %v, want v1alpha1.HealthConditions() %v", conds, want)
	}
	probes := Probes(cfg, nil)
	defer Close(probes)
	if len(probes) != len(rows) {
		t.Fatalf("%d probes by default, want %d", len(probes), len(rows))
	}
	for i, p := range probes {
		if p.Name() != rows[i].kind || p.Condition() != rows[i].condition {
			t.Errorf("probe %d is %s for %s, its kind says %s for %s", i, p.Name(), p.Condition(), rows[i].kind, rows[i].condition)
		}
	}
}

// TestEveryConfigSectionHasAProbeKind: each probe section of Config is the
// section of the kind named like its YAML key, and no kind lacks one.
func TestEveryConfigSectionHasAProbeKind(t *testing.T) {
	t.Parallel()
	var cfg Config
	byName := map[string]probeKind{}
	for _, k := range probeKinds {
		byName[k.name] = k
	}
	sectionType := reflect.TypeFor[section]()
	v := reflect.ValueOf(&cfg).Elem()
	found := 0
	for i := range v.NumField() {
		field := v.Type().Field(i)
		if !reflect.PointerTo(field.Type).Implements(sectionType) {
			continue
		}
		key, _, _ := strings.Cut(field.Tag.Get("json"), ",")
		k, ok := byName[key]
		if !ok {
			t.Errorf("Config.%s (%q) has no probe kind", field.Name, key)
			continue
		}
		found++
		if got := k.section(&cfg); reflect.ValueOf(got).Pointer() != v.Field(i).Addr().Pointer() {
			t.Errorf("kind %s's section is not Config.%s", k.name, field.Name)
		}
	}
	if found != len(probeKinds) {
		t.Errorf("%d probe sections in Config for %d probe kinds", found, len(probeKinds))
	}
}

// descRecorder is a Registerer that keeps what it is given to register.
type descRecorder struct{ descs []*prometheus.Desc }

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return nil
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Register(c)
	}
}

func (r *descRecorder) Unregister(prometheus.Collector) bool { return false }

// TestMetricsKeepTheirNamesAndLabels: dashboards, alerts and docs/health.md
// use these names and labels; the agent (shared metrics and every probe's
// own) registers exactly them.
func TestMetricsKeepTheirNamesAndLabels(t *testing.T) {
	t.Parallel()
	want := []string{
		"nodeward_detection_to_write_seconds{condition}",
		"nodeward_filesystem_avail_bytes{device,mountpoint}",
		"nodeward_filesystem_files_free{device,mountpoint}",
		"nodeward_filesystem_files{device,mountpoint}",
		"nodeward_filesystem_size_bytes{device,mountpoint}",
		"nodeward_memory_available_bytes{}",
		"nodeward_memory_total_bytes{}",
		"nodeward_netlink_overflows_total{}",
		"nodeward_netlink_resubscribes_total{}",
		"nodeward_network_up{}",
		"nodeward_node_condition{condition,status}",
		"nodeward_pressure_memory_polling{}",
		"nodeward_pressure_memory_stalled_seconds_total{kind}",
		"nodeward_pressure_memory_trigger_active{}",
		"nodeward_pressure_memory_trigger_events_total{}",
		"nodeward_pressure_memory_trigger_window_seconds{}",
		"nodeward_pressure_memory_waiting_ratio{kind,window}",
		"nodeward_probe_errors_total{probe}",
		"nodeward_processes_limit{}",
		"nodeward_processes{}",
		"nodeward_runtime_up{}",
	}
	rec := &descRecorder{}
	NewMetrics(rec)
	Probes(DefaultConfig(), &Env{Registerer: rec})
	var got []string
	for _, d := range rec.descs {
		// Desc{fqName: "x", help: "…", …, variableLabels: {a,b}}
		s := d.String()
		name := strings.Split(strings.SplitN(s, `fqName: "`, 2)[1], `"`)[0]
		labels := s[strings.LastIndex(s, "variableLabels: ")+len("variableLabels: "):]
		got = append(got, name+strings.TrimSuffix(labels, "}"))
	}
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("registered metrics\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// A second agent registry takes the same set again without a clash.
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	Probes(DefaultConfig(), &Env{Registerer: reg})
}

// fakeProbe samples whatever verdict it is given, at its clock's time.
type fakeProbe struct {
	verdict Verdict
	now     func() time.Time
}

func (p *fakeProbe) Name() string                        { return "fake" }
func (p *fakeProbe) Condition() corev1.NodeConditionType { return v1alpha1.ConditionDiskPressure }
func (p *fakeProbe) Interval() time.Duration             { return time.Hour }
func (p *fakeProbe) Sample(context.Context) Signal {
	return Signal{Condition: p.Condition(), Verdict: p.verdict, At: p.now()}
}

// TestClocksAreInjected: probes stamp samples with Env.Now, and the monitor
// times the end of a quiet period with its own Now.
func TestClocksAreInjected(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	now := t0
	clock := func() time.Time { return now }
	root := writeProc(t, map[string]string{"loadavg": "0 0 0 1/100 5\n", "sys/kernel/pid_max": "32768\n", "sys/kernel/threads-max": "90000\n"})
	if s := NewPIDsProbe(DefaultConfig().PIDs, root, &Env{Now: clock}).Sample(context.Background()); !s.At.Equal(t0) {
		t.Errorf("sample stamped %v, want the injected %v", s.At, t0)
	}

	p := &fakeProbe{verdict: Unhealthy, now: clock}
	mon := NewMonitor(MonitorConfig{Probes: []Probe{p}, Now: clock,
		Hysteresis: HysteresisConfig{BadSamples: 1, QuietPeriod: metav1.Duration{Duration: time.Minute}}})
	if next := mon.observe(p.Sample(context.Background()), p); next > time.Minute+20*time.Millisecond {
		t.Errorf("after a bad sample, next sample in %v, want by the end of the quiet period", next)
	}
	now = t0.Add(50 * time.Second)
	p.verdict = Healthy
	next := mon.observe(p.Sample(context.Background()), p)
	if next < 10*time.Second || next > 10*time.Second+20*time.Millisecond {
		t.Errorf("50 s into a 1 min quiet period, next sample in %v, want 10 s", next)
	}
	if c := mon.Conditions()[0]; c.Status != corev1.ConditionTrue {
		t.Errorf("condition %s inside the quiet period, want True", c.Status)
	}
	now = t0.Add(time.Minute)
	mon.observe(p.Sample(context.Background()), p)
	if c := mon.Conditions()[0]; c.Status != corev1.ConditionFalse || !c.LastTransition.Equal(now) {
		t.Errorf("after the quiet period: %s at %v, want False at %v", c.Status, c.LastTransition, now)
	}
}
