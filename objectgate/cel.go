package objectgate

import (
	"fmt"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
)

// CostLimit bounds one evaluation of one expression on one object, in
// CEL's cost units: Kubernetes's own per-expression limit for the CEL of
// CRD validation rules (apiextensions' PerCallLimit). An evaluation that
// exceeds it fails, as any runtime error does.
const CostLimit = 1_000_000

// maxPrograms bounds the cache: pools whose expressions keep changing
// would otherwise grow it forever. Past it the cache starts afresh.
const maxPrograms = 256

// Programs compiles expressions once and keeps them. It is safe for
// concurrent use.
type Programs struct {
	mu    sync.Mutex
	cache map[string]compiled
}

type compiled struct {
	prg cel.Program
	err error
}

// NewPrograms returns an empty cache.
func NewPrograms() *Programs { return &Programs{cache: map[string]compiled{}} }

// Get returns expr compiled, or why it does not compile; both are cached,
// so a broken expression is not compiled again on every evaluation.
func (p *Programs) Get(expr string) (cel.Program, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.cache[expr]; ok {
		return c.prg, c.err
	}
	if len(p.cache) >= maxPrograms {
		p.cache = map[string]compiled{}
	}
	prg, err := Compile(expr)
	p.cache[expr] = compiled{prg, err}
	return prg, err
}

// Compile parses and type-checks expr with `object` bound to a map of the
// object's unstructured content, as Kubernetes binds the objects of its
// own CEL whose schema it does not know, and the string extensions
// Kubernetes offers. The expression must be of type bool: one of type dyn
// (a bare field, say) is refused rather than trusted to be a bool at
// runtime.
func Compile(expr string) (cel.Program, error) {
	env, err := cel.NewEnv(
		cel.Variable("object", cel.MapType(cel.StringType, cel.DynType)),
		ext.Strings(),
	)
	if err != nil {
		return nil, fmt.Errorf("CEL environment: %w", err)
	}
	ast, issues := env.Compile(expr)
	if issues.Err() != nil {
		return nil, issues.Err()
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("expression is of type %s, want bool (compare the field, as in object.status.ready == true)", ast.OutputType())
	}
	prg, err := env.Program(ast, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("CEL program: %w", err)
	}
	return prg, nil
}

// Eval runs prg on object's unstructured content: true, false, or the
// runtime error (no such field, the cost limit exceeded, ...), which the
// gate takes for a failure.
func Eval(prg cel.Program, object map[string]any) (bool, error) {
	out, _, err := prg.Eval(map[string]any{"object": object})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("expression returned %T, want bool", out.Value())
	}
	return b, nil
}
