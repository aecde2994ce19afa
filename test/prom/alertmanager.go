package prom

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/testenv"
)

// Alertmanager is a real Alertmanager, the Debian package's
// prometheus-alertmanager (0.25), on a loopback port: one route to a
// receiver that sends nothing, no gossip (an empty
// --cluster.listen-address), its data in the test's temporary directory.
// It talks to it through the API v2 with JSON decoding of its own, so that
// what a test reads back does not go through the code under test.
type Alertmanager struct {
	// URL is the base URL of the web server, http://127.0.0.1:<port>.
	URL  string
	proc *cluster.Process
}

// SilenceMatcher is one matcher of a Silence, as the API gives it.
type SilenceMatcher struct {
	Name, Value string
	IsRegex     bool
	IsEqual     bool // true when the API leaves it out (its default)
}

// Silence is a silence as GET /api/v2/silences gives it.
type Silence struct {
	ID        string
	State     string // active, pending or expired
	Matchers  []SilenceMatcher
	CreatedBy string
	Comment   string
	StartsAt  time.Time
	EndsAt    time.Time
}

const amConfig = `route:
  receiver: blackhole
receivers:
  - name: blackhole
`

// StartAlertmanager runs an Alertmanager until t ends and waits until it
// is ready. Outside CI it skips t when prometheus-alertmanager is not
// installed; in CI that fails t.
func StartAlertmanager(t testing.TB) *Alertmanager {
	t.Helper()
	bin := testenv.RequireBinary(t, "prometheus-alertmanager")
	dir := t.TempDir()
	config := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(config, []byte(amConfig), 0o644); err != nil {
		t.Fatalf("write the Alertmanager configuration: %v", err)
	}
	s := server{name: "alertmanager", binary: bin, dir: dir, args: func(addr, data string) []string {
		return []string{"--config.file=" + config, "--storage.path=" + data, "--web.listen-address=" + addr,
			"--cluster.listen-address=", "--log.level=debug"}
	}}
	var am *Alertmanager
	proc, _, logPath, err := serve(s, func(ctx context.Context, base string, proc *cluster.Process) error {
		am = &Alertmanager{URL: base, proc: proc}
		return cluster.Poll(ctx, "Alertmanager at "+base+" to be ready", 20*time.Millisecond, []*cluster.Process{proc},
			func(ctx context.Context) (bool, error) {
				err := am.call(ctx, http.MethodGet, "/-/ready", nil, nil)
				return err == nil, err
			})
	})
	if err != nil {
		t.Fatalf("start Alertmanager: %v", err)
	}
	t.Cleanup(func() {
		proc.Stop(10 * time.Second)
		if t.Failed() {
			amLogTail(t, logPath)
		}
	})
	return am
}

func amLogTail(t testing.TB, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	t.Logf("the end of %s:\n%s", path, b)
}

type amMatcherJSON struct {
	Name    string `json:"name"`
	Value   string `json:"value"`
	IsRegex bool   `json:"isRegex"`
	IsEqual *bool  `json:"isEqual,omitempty"`
}

type amSilenceJSON struct {
	ID     string `json:"id,omitempty"`
	Status *struct {
		State string `json:"state"`
	} `json:"status,omitempty"`
	Matchers  []amMatcherJSON `json:"matchers"`
	StartsAt  time.Time       `json:"startsAt"`
	EndsAt    time.Time       `json:"endsAt"`
	CreatedBy string          `json:"createdBy"`
	Comment   string          `json:"comment"`
}

// Silences returns every silence, expired ones included.
func (am *Alertmanager) Silences(t testing.TB) []Silence {
	t.Helper()
	var got []amSilenceJSON
	if err := am.call(context.Background(), http.MethodGet, "/api/v2/silences", nil, &got); err != nil {
		t.Fatalf("list silences: %v", err)
	}
	out := make([]Silence, 0, len(got))
	for _, g := range got {
		s := Silence{ID: g.ID, CreatedBy: g.CreatedBy, Comment: g.Comment, StartsAt: g.StartsAt, EndsAt: g.EndsAt}
		if g.Status != nil {
			s.State = g.Status.State
		}
		for _, m := range g.Matchers {
			s.Matchers = append(s.Matchers, SilenceMatcher{Name: m.Name, Value: m.Value, IsRegex: m.IsRegex, IsEqual: m.IsEqual == nil || *m.IsEqual})
		}
		out = append(out, s)
	}
	return out
}

// PostSilence creates s (or updates s.ID) and returns its ID. A zero
// StartsAt is now, a zero EndsAt an hour later.
func (am *Alertmanager) PostSilence(t testing.TB, s Silence) string {
	t.Helper()
	body := amSilenceJSON{ID: s.ID, StartsAt: s.StartsAt, EndsAt: s.EndsAt, CreatedBy: s.CreatedBy, Comment: s.Comment}
	if body.StartsAt.IsZero() {
		body.StartsAt = time.Now()
	}
	if body.EndsAt.IsZero() {
		body.EndsAt = body.StartsAt.Add(time.Hour)
	}
	for _, m := range s.Matchers {
		body.Matchers = append(body.Matchers, amMatcherJSON{m.Name, m.Value, m.IsRegex, &m.IsEqual})
	}
	var out struct {
		SilenceID string `json:"silenceID"`
	}
	if err := am.call(context.Background(), http.MethodPost, "/api/v2/silences", body, &out); err != nil {
		t.Fatalf("post a silence: %v", err)
	}
	return out.SilenceID
}

// PostAlert fires an alert with labels, for an hour.
func (am *Alertmanager) PostAlert(t testing.TB, labels map[string]string) {
	t.Helper()
	now := time.Now()
	alerts := []map[string]any{{"labels": labels, "startsAt": now, "endsAt": now.Add(time.Hour)}}
	if err := am.call(context.Background(), http.MethodPost, "/api/v2/alerts", alerts, nil); err != nil {
		t.Fatalf("post an alert: %v", err)
	}
}

// AlertStatus returns the state of the alert with exactly labels
// (unprocessed, active or suppressed) and the IDs of the silences muting
// it; found is false when Alertmanager has no such alert.
func (am *Alertmanager) AlertStatus(t testing.TB, labels map[string]string) (state string, silencedBy []string, found bool) {
	t.Helper()
	var got []struct {
		Labels map[string]string `json:"labels"`
		Status struct {
			State      string   `json:"state"`
			SilencedBy []string `json:"silencedBy"`
		} `json:"status"`
	}
	if err := am.call(context.Background(), http.MethodGet, "/api/v2/alerts", nil, &got); err != nil {
		t.Fatalf("list alerts: %v", err)
	}
	for _, a := range got {
		if amEqualLabels(a.Labels, labels) {
			return a.Status.State, a.Status.SilencedBy, true
		}
	}
	return "", nil, false
}

func amEqualLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// call sends body as JSON and decodes a 200 answer into out.
func (am *Alertmanager) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, am.URL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", method, req.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, req.URL, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode %s: %w", method, req.URL, b, err)
		}
	}
	return nil
}
