package objectgate

import (
	"strings"
	"testing"
)

// storage is a storage cluster's unstructured content, as the dynamic
// client decodes it.
func storage(health string) map[string]any {
	return map[string]any{
		"apiVersion": "test.nodeward.io/v1", "kind": "StorageCluster",
		"metadata": map[string]any{"name": "ceph", "namespace": "storage"},
		"status":   map[string]any{"health": health, "osds": int64(3), "ratio": 0.5},
	}
}

func TestCompileRefusesWhatIsNotABoolExpression(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`object.status.health ==`, "Syntax error"},
		{`object.status.health == "HEALTH_OK" &&`, "Syntax error"},
		{`nosuchvar == 1`, "undeclared reference to 'nosuchvar'"},
		{`object.status.health`, "want bool"},
		{`size(object.metadata)`, "want bool"},
		{`"text"`, "want bool"},
	} {
		if _, err := Compile(tc.expr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%q) = %v, want an error containing %q", tc.expr, err, tc.want)
		}
	}
}

func TestEvalOnUnstructuredContent(t *testing.T) {
	for _, tc := range []struct {
		expr   string
		health string
		want   bool
	}{
		{`object.status.health == "HEALTH_OK"`, "HEALTH_OK", true},
		{`object.status.health == "HEALTH_OK"`, "HEALTH_WARN", false},
		{`object.status.osds >= 3 && object.status.ratio < 0.9`, "x", true},
		{`object.metadata.name.startsWith("ce") && object.status.health.lowerAscii() == "ok"`, "OK", true},
		{`has(object.status.degraded) ? false : true`, "x", true},
	} {
		prg, err := Compile(tc.expr)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.expr, err)
		}
		got, err := Eval(prg, storage(tc.health))
		if err != nil || got != tc.want {
			t.Errorf("Eval(%q) on health %s = %v, %v; want %v", tc.expr, tc.health, got, err, tc.want)
		}
	}
}

// TestEvalFailsClosed: a missing field and an exceeded cost limit are
// errors, never true.
func TestEvalFailsClosed(t *testing.T) {
	items := make([]any, 1000)
	for i := range items {
		items[i] = int64(i)
	}
	obj := storage("HEALTH_OK")
	obj["spec"] = map[string]any{"items": items}
	for _, tc := range []struct{ expr, want string }{
		{`object.status.missing == "x"`, "no such key"},
		{`object.spec.items.all(x, object.spec.items.all(y, x + y >= 0))`, "cost limit exceeded"},
	} {
		prg, err := Compile(tc.expr)
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.expr, err)
		}
		got, err := Eval(prg, obj)
		if got || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Eval(%q) = %v, %v; want false and an error containing %q", tc.expr, got, err, tc.want)
		}
	}
}

// TestProgramsCompileOnce: the cache returns the same program, and the
// same error, without compiling again.
func TestProgramsCompileOnce(t *testing.T) {
	p := NewPrograms()
	a, err := p.Get(`object.status.health == "HEALTH_OK"`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := p.Get(`object.status.health == "HEALTH_OK"`)
	if a != b {
		t.Error("the same expression compiled twice")
	}
	if _, err := p.Get(`object.status.health`); err == nil {
		t.Error("a non-bool expression compiled")
	}
	if len(p.cache) != 2 {
		t.Errorf("cache holds %d programs, want 2 (one failed)", len(p.cache))
	}
}
