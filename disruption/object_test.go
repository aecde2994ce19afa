package disruption

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// object wraps a nodeDisruptionPolicyStatus into a MachineConfiguration
// whose status is current.
func object(status map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "operator.openshift.io/v1",
		"kind":       "MachineConfiguration",
		"metadata":   map[string]any{"name": "cluster", "generation": int64(3)},
		"status":     map[string]any{"observedGeneration": int64(3), "nodeDisruptionPolicyStatus": status},
	}
}

// viaJSON is obj as a client that decodes JSON into maps sees it (numbers
// as float64).
func viaJSON(t testing.TB, obj map[string]any) map[string]any {
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStatusObjectRoundTrip(t *testing.T) {
	for _, obj := range []map[string]any{object(StatusObject(DefaultPolicies())), viaJSON(t, object(StatusObject(DefaultPolicies())))} {
		got, err := PoliciesFrom(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, DefaultPolicies()) {
			t.Fatalf("PoliciesFrom(StatusObject(DefaultPolicies())) =\n%+v\nwant\n%+v", got, DefaultPolicies())
		}
	}
}

func TestStatusObjectJSON(t *testing.T) {
	b, _ := json.Marshal(StatusObject(Policies{}))
	if want := `{"clusterPolicies":{"sshkey":{"actions":[]}}}`; string(b) != want {
		t.Errorf("empty policies: %s, want %s", b, want)
	}
	b, _ = json.Marshal(StatusObject(DefaultPolicies()))
	for _, want := range []string{
		`{"actions":[{"type":"Special"}],"path":"/etc/containers/registries.conf"}`,
		`{"actions":[{"reload":{"serviceName":"crio.service"},"type":"Reload"}],"path":"/etc/containers/policy.json"}`,
		`"units":[{"actions":[{"type":"DaemonReload"},{"restart":{"serviceName":"iri-registry.service"},"type":"Restart"}],"name":"iri-registry.service"}]`,
		`"sshkey":{"actions":[{"type":"None"}]}`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("default status lacks %s:\n%s", want, b)
		}
	}
}

// The status the MCO's documentation shows parses, is ready, and its user
// policy takes effect.
func TestPoliciesFromDocumented(t *testing.T) {
	raw, err := os.ReadFile("testdata/machineconfiguration-documented.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	if ok, why := Ready(obj); !ok {
		t.Fatalf("not ready: %s", why)
	}
	p, err := PoliciesFrom(obj)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Files) != 8 || p.Files[7].Path != "/etc/my-file" || !reflect.DeepEqual(p.SSHKey, []Action{{Type: None}}) {
		t.Fatalf("policies %+v", p)
	}
	plan, err := Compute(base(), edit(setFile("/etc/my-file", "x")), p, false)
	if err != nil || !reflect.DeepEqual(plan.Actions, []Action{{Type: None}}) || plan.Drain {
		t.Fatalf("plan %+v, %v; want None without drain", plan, err)
	}
}

func TestPoliciesFromMissing(t *testing.T) {
	for _, obj := range []map[string]any{{}, {"status": map[string]any{}}, object(nil)} {
		p, err := PoliciesFrom(obj)
		if err != nil || !reflect.DeepEqual(p, Policies{}) {
			t.Errorf("PoliciesFrom(%v) = %+v, %v; want empty policies", obj, p, err)
		}
	}
}

func TestPoliciesFromErrors(t *testing.T) {
	const at = "status.nodeDisruptionPolicyStatus.clusterPolicies"
	tests := []struct {
		name   string
		status string // JSON of nodeDisruptionPolicyStatus
		want   string
	}{
		{"unknown action", `{"clusterPolicies":{"files":[{"path":"/a","actions":[]},{"path":"/b","actions":[]},{"path":"/c","actions":[{"type":"Reboo"}]}]}}`,
			at + `.files[2].actions[0].type: unknown action "Reboo"`},
		{"reload without service", `{"clusterPolicies":{"units":[{"name":"a.service","actions":[{"type":"Reload"}]}]}}`,
			at + `.units[0].actions[0].reload: is required when type is Reload`},
		{"reload with an empty service", `{"clusterPolicies":{"sshkey":{"actions":[{"type":"Reload","reload":{"serviceName":""}}]}}}`,
			at + `.sshkey.actions[0].reload.serviceName: must name a systemd unit`},
		{"restart on a Reload", `{"clusterPolicies":{"files":[{"path":"/a","actions":[{"type":"Reload","reload":{"serviceName":"a.service"},"restart":{"serviceName":"b.service"}}]}]}}`,
			at + `.files[0].actions[0].restart: is only allowed when type is Restart`},
		{"files not a list", `{"clusterPolicies":{"files":{"path":"/a"}}}`, at + `.files: want a list, have an object`},
		{"file not an object", `{"clusterPolicies":{"files":["/a"]}}`, at + `.files[0]: want an object, have a string`},
		{"path a number", `{"clusterPolicies":{"files":[{"path":3,"actions":[]}]}}`, at + `.files[0].path: want a string, have a number`},
		{"empty path", `{"clusterPolicies":{"files":[{"actions":[]}]}}`, at + `.files[0].path: must not be empty`},
		{"sshkey a list", `{"clusterPolicies":{"sshkey":[]}}`, at + `.sshkey: want an object, have a list`},
		{"type a boolean", `{"clusterPolicies":{"sshkey":{"actions":[{"type":true}]}}}`, at + `.sshkey.actions[0].type: want a string, have a boolean`},
		{"clusterPolicies a string", `{"clusterPolicies":"x"}`, at + `: want an object, have a string`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var status map[string]any
			if err := json.Unmarshal([]byte(tc.status), &status); err != nil {
				t.Fatal(err)
			}
			_, err := PoliciesFrom(object(status))
			var fe *FieldError
			if !errors.As(err, &fe) || err.Error() != tc.want {
				t.Fatalf("error %v, want the *FieldError %q", err, tc.want)
			}
		})
	}
}

func TestReady(t *testing.T) {
	lagging := object(StatusObject(DefaultPolicies()))
	lagging["metadata"].(map[string]any)["generation"] = int64(4)
	badGen := object(nil)
	badGen["metadata"].(map[string]any)["generation"] = "4"
	tests := []struct {
		name  string
		obj   map[string]any
		ready bool
		why   string
	}{
		{"current", object(StatusObject(DefaultPolicies())), true, ""},
		{"current, decoded from JSON", viaJSON(t, object(nil)), true, ""},
		{"generation lag", lagging, false, "NodeDisruptionPolicyStatus is not up to date: the operator has observed generation 3 of MachineConfiguration/cluster, which is at generation 4"},
		{"generation lag, decoded from JSON", viaJSON(t, lagging), false, "not up to date"},
		{"no status yet", map[string]any{"metadata": map[string]any{"generation": int64(1)}}, false, "observed generation 0"},
		{"absent", nil, false, "has not been created yet"},
		{"generation a string", badGen, false, "metadata.generation: want an integer, have a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ready, why := Ready(tc.obj)
			if ready != tc.ready || !strings.Contains(why, tc.why) || (ready && why != "") {
				t.Fatalf("Ready = %v, %q; want %v, %q", ready, why, tc.ready, tc.why)
			}
		})
	}
}

func TestMergePolicies(t *testing.T) {
	var spec map[string]any
	err := json.Unmarshal([]byte(`{"nodeDisruptionPolicy":{
		"files":[
			{"path":"/etc/containers/policy.json","actions":[{"type":"Restart","restart":{"serviceName":"crio.service"}}]},
			{"path":"/etc/my-file","actions":[{"type":"None"}]}],
		"units":[
			{"name":"iri-registry.service","actions":[{"type":"None"}]},
			{"name":"chronyd.service","actions":[{"type":"Reload","reload":{"serviceName":"chronyd.service"}}]}],
		"sshkey":{"actions":[{"type":"Drain"}]}}}`), &spec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := MergePolicies(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultPolicies()
	want.Files[2] = FilePolicy{Path: "/etc/containers/policy.json", Actions: []Action{{Type: Restart, Unit: crio}}}
	want.Files = append(want.Files, FilePolicy{Path: "/etc/my-file", Actions: []Action{{Type: None}}})
	want.Units = []UnitPolicy{
		{Name: iriRegistry, Actions: []Action{{Type: None}}},
		{Name: "chronyd.service", Actions: []Action{{Type: Reload, Unit: "chronyd.service"}}},
	}
	want.SSHKey = []Action{{Type: Drain}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("merged\n%+v\nwant\n%+v", got, want)
	}
	if got, err := MergePolicies(nil); err != nil || !reflect.DeepEqual(got, DefaultPolicies()) {
		t.Fatalf("MergePolicies(nil) = %+v, %v; want the defaults", got, err)
	}
	// Merging does not change the defaults handed out later.
	if DefaultPolicies().Files[2].Actions[0].Type != Reload {
		t.Fatal("the merge changed the default table")
	}
}

func TestMergePoliciesRefusesSpecial(t *testing.T) {
	spec := map[string]any{"nodeDisruptionPolicy": map[string]any{"files": []any{
		map[string]any{"path": "/etc/x", "actions": []any{map[string]any{"type": "Special"}}},
	}}}
	_, err := MergePolicies(spec)
	if want := `spec.nodeDisruptionPolicy.files[0].actions[0].type: unknown action "Special"`; err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}
