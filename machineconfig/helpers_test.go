package machineconfig

import (
	"encoding/json"
	"testing"
)

// mc builds the JSON of a MachineConfig with the given Ignition config and
// extra spec fields.
func mc(t testing.TB, ign string, spec map[string]any) []byte {
	t.Helper()
	s := map[string]any{}
	for k, v := range spec {
		s[k] = v
	}
	if ign != "" {
		s["config"] = json.RawMessage(ign)
	}
	b, err := json.Marshal(map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": "rendered-worker-1"},
		"spec":     s,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustParse(t testing.TB, ign string, spec map[string]any) *Config {
	t.Helper()
	c, err := Parse(mc(t, ign, spec))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}
