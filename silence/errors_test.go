package silence_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/silence"
	"github.com/nodeward/nodeward/test/cluster"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := func() *v1alpha1.Silences { return &v1alpha1.Silences{Alertmanager: "http://am.monitoring.svc:9093"} }
	with := func(f func(*v1alpha1.Silences)) *v1alpha1.Silences { s := ok(); f(s); return s }
	matcher := func(m v1alpha1.SilenceMatcher) *v1alpha1.Silences {
		return with(func(s *v1alpha1.Silences) {
			s.Matchers = []v1alpha1.SilenceMatcher{{Name: "team", Value: "infra"}, m}
		})
	}
	for _, tc := range []struct {
		name string
		spec *v1alpha1.Silences
		want string // "": valid
	}{
		{"nil", nil, ""},
		{"minimal", ok(), ""},
		{"full", with(func(s *v1alpha1.Silences) {
			s.Alertmanager = "https://am.example.com/alertmanager/"
			s.NodeLabel = "instance"
			s.Matchers = []v1alpha1.SilenceMatcher{{Name: "severity", Value: "critical|warning", IsRegex: true}, {Name: "_x", Value: "", NotEqual: true}}
		}), ""},
		{"no URL", with(func(s *v1alpha1.Silences) { s.Alertmanager = "" }), `silences.alertmanager ""`},
		{"relative URL", with(func(s *v1alpha1.Silences) { s.Alertmanager = "am:9093" }), `silences.alertmanager "am:9093"`},
		{"ftp", with(func(s *v1alpha1.Silences) { s.Alertmanager = "ftp://am" }), `silences.alertmanager "ftp://am"`},
		{"no host", with(func(s *v1alpha1.Silences) { s.Alertmanager = "http:///x" }), `silences.alertmanager "http:///x"`},
		{"query", with(func(s *v1alpha1.Silences) { s.Alertmanager = "http://am?x=1" }), `silences.alertmanager "http://am?x=1"`},
		{"credentials", with(func(s *v1alpha1.Silences) { s.Alertmanager = "http://u:p@am" }), `silences.alertmanager "http://u:p@am"`},
		{"bad URL", with(func(s *v1alpha1.Silences) { s.Alertmanager = "http://a m" }), `silences.alertmanager "http://a m"`},
		{"node label digit", with(func(s *v1alpha1.Silences) { s.NodeLabel = "1node" }), `silences.nodeLabel "1node"`},
		{"node label dash", with(func(s *v1alpha1.Silences) { s.NodeLabel = "node-name" }), `silences.nodeLabel "node-name"`},
		{"matcher without name", matcher(v1alpha1.SilenceMatcher{Value: "x"}), `silences.matchers[1].name ""`},
		{"matcher name dot", matcher(v1alpha1.SilenceMatcher{Name: "a.b", Value: "x"}), `silences.matchers[1].name "a.b"`},
		{"bad regex", matcher(v1alpha1.SilenceMatcher{Name: "a", Value: "(", IsRegex: true}), `silences.matchers[1].value "("`},
		{"Perl lookahead", matcher(v1alpha1.SilenceMatcher{Name: "a", Value: "(?!x)", IsRegex: true}), `silences.matchers[1].value "(?!x)"`},
		{"parenthesis, not a regex", matcher(v1alpha1.SilenceMatcher{Name: "a", Value: "("}), ""},
	} {
		err := silence.Validate(tc.spec)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want+": ")):
			t.Errorf("%s: got %v, want an error starting %s", tc.name, err, tc.want)
		}
	}
}

func TestSyncUnreachable(t *testing.T) {
	t.Parallel()
	ports, err := cluster.FreePorts(1) // closed again: nothing listens
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	ids, err := silence.NewKeeper(nil, nil).Sync(context.Background(), "p", &v1alpha1.Silences{Alertmanager: url}, []string{"a"})
	if err == nil || !strings.Contains(err.Error(), url) || len(ids) != 0 {
		t.Fatalf("Sync with nothing at %s: %v, %v", url, ids, err)
	}
	t.Log(err)
}

func TestSyncNilSpecOrBadSpec(t *testing.T) {
	t.Parallel()
	k := silence.NewKeeper(nil, nil)
	if _, err := k.Sync(context.Background(), "p", nil, []string{"a"}); err == nil {
		t.Error("Sync without a spec succeeded")
	}
	_, err := k.Sync(context.Background(), "p", &v1alpha1.Silences{Alertmanager: "http://am", NodeLabel: "x-y"}, nil)
	if err == nil || !strings.Contains(err.Error(), "silences.nodeLabel") {
		t.Errorf("Sync with a bad spec: %v", err)
	}
}

// TestSyncErrorAnswers: an answer other than 200 is an error with its
// status and body, naming the node; the other nodes still get theirs.
func TestSyncErrorAnswers(t *testing.T) {
	t.Parallel()
	t.Run("list", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `"the silences are on fire"`, http.StatusInternalServerError)
		}))
		defer srv.Close()
		_, err := silence.NewKeeper(srv.Client(), nil).Sync(context.Background(), "p", &v1alpha1.Silences{Alertmanager: srv.URL}, []string{"a"})
		for _, want := range []string{srv.URL, "500 Internal Server Error", "the silences are on fire", "pool p"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Sync against a failing GET: %v, want it to say %s", err, want)
			}
		}
	})
	t.Run("create", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == http.MethodGet:
				fmt.Fprint(w, `[]`)
			case r.Method == http.MethodPost && r.URL.Path == "/am/api/v2/silences":
				body, _ := io.ReadAll(r.Body)
				if strings.Contains(string(body), "node=bad") {
					http.Error(w, `"silence invalid: no"`, http.StatusBadRequest)
					return
				}
				fmt.Fprint(w, `{"silenceID":"id-good"}`)
			default:
				http.NotFound(w, r)
			}
		}))
		defer srv.Close()
		ids, err := silence.NewKeeper(srv.Client(), nil).Sync(context.Background(), "p", &v1alpha1.Silences{Alertmanager: srv.URL + "/am"}, []string{"bad", "good"})
		if ids["good"] != "id-good" || len(ids) != 1 {
			t.Errorf("IDs %v, want good's only", ids)
		}
		for _, want := range []string{"node bad", srv.URL + "/am", "400 Bad Request", "silence invalid: no"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Sync with a refused POST: %v, want it to say %s", err, want)
			}
		}
		t.Log(err)
		if err != nil && strings.Contains(err.Error(), "node good") {
			t.Errorf("the error mentions the node that succeeded: %v", err)
		}
	})
	t.Run("expire", func(t *testing.T) {
		t.Parallel()
		deleted := map[string]bool{}
		var mu sync.Mutex
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.Method {
			case http.MethodGet:
				fmt.Fprint(w, `[`+owned("id-1", "gone1")+`,`+owned("id-2", "gone2")+`]`)
			case http.MethodDelete:
				mu.Lock()
				deleted[r.URL.Path] = true
				mu.Unlock()
				if strings.HasSuffix(r.URL.Path, "/id-1") {
					http.Error(w, `"silence not found"`, http.StatusInternalServerError)
				}
			default:
				http.NotFound(w, r)
			}
		}))
		defer srv.Close()
		_, err := silence.NewKeeper(srv.Client(), nil).Sync(context.Background(), "p", &v1alpha1.Silences{Alertmanager: srv.URL}, nil)
		t.Log(err)
		for _, want := range []string{"silence id-1 of node gone1", "500 Internal Server Error", "silence not found"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Sync with a refused DELETE: %v, want it to say %s", err, want)
			}
		}
		if err != nil && strings.Contains(err.Error(), "gone2") {
			t.Errorf("the error mentions the silence that expired: %v", err)
		}
		if !deleted["/api/v2/silence/id-1"] || !deleted["/api/v2/silence/id-2"] {
			t.Errorf("DELETEs %v, want both silences'", deleted)
		}
	})
}

// owned is the JSON of an active silence the keeper made for node in pool p.
func owned(id, node string) string {
	return fmt.Sprintf(`{"id":%q,"status":{"state":"active"},"createdBy":"nodeward-coordinator",`+
		`"comment":"nodeward: pool=p node=%s: planned update","startsAt":"2026-01-01T00:00:00Z","endsAt":"2099-01-01T00:00:00Z",`+
		`"matchers":[{"name":"node","value":"x","isRegex":false,"isEqual":true}]}`, id, node)
}
