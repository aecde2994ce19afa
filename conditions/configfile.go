package conditions

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// The configuration file's header, as KubeletConfiguration's.
const (
	ConfigAPIVersion = v1alpha1.GroupName + "/" + v1alpha1.Version
	ConfigKind       = "AgentConfig"
)

// MissingHeaderWarning is DecodeFile's warning for a file without
// apiVersion and kind: it still loads, as files written before them do.
const MissingHeaderWarning = "the config file has no apiVersion and kind; they are required for new files: add the lines " +
	`"apiVersion: ` + ConfigAPIVersion + `" and "kind: ` + ConfigKind + `" at its top`

// maxDepth bounds the walk; the configuration types nest far less.
const maxDepth = 16

// DecodeFile reads a configuration file's YAML over out (a pointer to a
// struct holding the defaults), then runs validate on the result. Every
// problem is reported at once as a FieldErrors, each naming the field's
// path, the value and, for the values the file holds, its line: syntax
// errors, a wrong apiVersion or kind, unknown fields and values of the
// wrong type; then, when there are none of those, validate's. A null
// value keeps the default. The warnings are for the operator (a file
// without apiVersion and kind).
func DecodeFile(data []byte, out any, validate func() error) ([]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	d := fileDecoder{lines: map[string]int{}}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		root = doc.Content[0]
	}
	var warnings []string
	var value any
	switch {
	case doc.Kind == 0 || isNull(root):
		warnings = append(warnings, MissingHeaderWarning)
	case root.Kind != yaml.MappingNode:
		d.errs.addAt(root.Line, "(file)", render(root), "must be a mapping of field names to values")
	default:
		if d.header(root) {
			warnings = append(warnings, MissingHeaderWarning)
		}
		value = d.value("", root, reflect.TypeOf(out).Elem(), 0)
	}
	// The values in error were left out: the rest decodes and validates,
	// so that every problem is reported at once.
	if value != nil {
		data, err := json.Marshal(value)
		if err == nil {
			err = json.Unmarshal(data, out)
		}
		if err != nil {
			return warnings, errors.Join(d.errs.Err(), fmt.Errorf("invalid config: %w", err))
		}
	}
	if validate != nil {
		err := validate()
		var errs FieldErrors
		if err != nil && !errors.As(err, &errs) {
			return warnings, errors.Join(d.errs.Err(), err)
		}
		for _, e := range errs {
			e.Line = d.lines[e.Field]
			d.errs = append(d.errs, e)
		}
	}
	// In the file's order; values the file does not hold last.
	slices.SortStableFunc(d.errs, func(a, b FieldError) int {
		return cmp.Compare(lineOrder(a.Line), lineOrder(b.Line))
	})
	return warnings, d.errs.Err()
}

func lineOrder(line int) int {
	if line == 0 {
		return math.MaxInt
	}
	return line
}

// fileDecoder checks a YAML tree against a configuration type and builds
// the JSON value the type decodes from.
type fileDecoder struct {
	errs FieldErrors
	// lines are the lines of the file's values by field path.
	lines map[string]int
}

// header checks apiVersion and kind; it says whether both are missing.
func (d *fileDecoder) header(root *yaml.Node) bool {
	var apiVersion, kind *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		switch root.Content[i].Value {
		case "apiVersion":
			apiVersion = root.Content[i+1]
		case "kind":
			kind = root.Content[i+1]
		}
	}
	if apiVersion == nil && kind == nil {
		return true
	}
	d.headerField("apiVersion", apiVersion, kind, ConfigAPIVersion, root.Line)
	d.headerField("kind", kind, apiVersion, ConfigKind, root.Line)
	return false
}

func (d *fileDecoder) headerField(name string, n, other *yaml.Node, want string, line int) {
	switch {
	case n == nil:
		d.errs.addAt(other.Line, name, "", fmt.Sprintf("missing: a file with %s needs %s: %s", otherName(name), name, want))
	case n.Kind != yaml.ScalarNode || n.Tag != "!!str" || n.Value != want:
		d.errs.addAt(n.Line, name, render(n), "must be "+want)
	}
}

func otherName(name string) string {
	if name == "kind" {
		return "apiVersion"
	}
	return "kind"
}

// value checks n against t and returns its JSON value; nil leaves the
// default.
func (d *fileDecoder) value(path string, n *yaml.Node, t reflect.Type, depth int) any {
	if depth > maxDepth {
		d.errs.addAt(n.Line, path, render(n), "nested too deeply")
		return nil
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return nil
		}
		n = n.Alias
	}
	if isNull(n) {
		return nil
	}
	switch {
	case t == reflect.TypeFor[metav1.Duration]():
		if n.Kind == yaml.ScalarNode {
			if _, err := time.ParseDuration(n.Value); err == nil {
				return n.Value
			}
		}
		d.errs.addAt(n.Line, path, render(n), `must be a duration such as "30s" or "5m"`)
	case t.Kind() == reflect.Struct:
		return d.mapping(path, n, t, depth)
	case t.Kind() == reflect.Slice:
		return d.sequence(path, n, t, depth)
	default:
		return d.scalar(path, n, t)
	}
	return nil
}

func (d *fileDecoder) mapping(path string, n *yaml.Node, t reflect.Type, depth int) any {
	if n.Kind != yaml.MappingNode {
		d.errs.addAt(n.Line, path, render(n), "must be a mapping of field names to values")
		return nil
	}
	fields := map[string]reflect.Type{}
	jsonFields(t, fields)
	out := map[string]any{}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		if path == "" && (k.Value == "apiVersion" || k.Value == "kind") {
			continue // header
		}
		ft, ok := fields[k.Value]
		switch {
		case k.Kind != yaml.ScalarNode || k.Tag == "!!merge":
			d.errs.addAt(k.Line, path, render(k), "field names must be plain strings (no merge keys)")
		case seen[k.Value]:
			d.errs.addAt(k.Line, p, render(v), "duplicate field")
		case !ok:
			d.errs.addAt(k.Line, p, render(v), "unknown field"+suggest(k.Value, fields))
		default:
			seen[k.Value] = true
			d.lines[p] = k.Line
			if val := d.value(p, v, ft, depth+1); val != nil {
				out[k.Value] = val
			}
		}
	}
	return out
}

func (d *fileDecoder) sequence(path string, n *yaml.Node, t reflect.Type, depth int) any {
	if n.Kind != yaml.SequenceNode {
		d.errs.addAt(n.Line, path, render(n), "must be a list")
		return nil
	}
	out := make([]any, 0, len(n.Content))
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.lines[p] = item.Line
		out = append(out, d.value(p, item, t.Elem(), depth+1))
	}
	return out
}

func (d *fileDecoder) scalar(path string, n *yaml.Node, t reflect.Type) any {
	if n.Kind != yaml.ScalarNode {
		d.errs.addAt(n.Line, path, render(n), "must be "+typeName(t))
		return nil
	}
	var (
		val any
		ok  bool
	)
	switch t.Kind() {
	case reflect.String:
		val, ok = n.Value, n.Tag == "!!str"
	case reflect.Bool:
		var b bool
		ok = n.Decode(&b) == nil
		val = b
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var i int64
		ok = n.Decode(&i) == nil && !reflect.Zero(t).OverflowInt(i)
		val = i
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		var u uint64
		ok = n.Tag == "!!int" && n.Decode(&u) == nil && !reflect.Zero(t).OverflowUint(u)
		val = u
	case reflect.Float32, reflect.Float64:
		var f float64
		ok = n.Decode(&f) == nil && !math.IsNaN(f) && !math.IsInf(f, 0) && !reflect.Zero(t).OverflowFloat(f)
		val = f
	default:
		d.errs.addAt(n.Line, path, render(n), "has a type the file cannot set")
		return nil
	}
	if !ok {
		d.errs.addAt(n.Line, path, render(n), "must be "+typeName(t))
		return nil
	}
	return val
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string (quote it)"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a " + t.Kind().String()
}

// jsonFields adds t's fields by JSON name, embedded structs' inline.
func jsonFields(t reflect.Type, fields map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			jsonFields(f.Type, fields)
		case name == "":
			fields[f.Name] = f.Type
		default:
			fields[name] = f.Type
		}
	}
}

// suggest names a known field within two edits of name.
func suggest(name string, fields map[string]reflect.Type) string {
	best, bestDist := "", 3
	for f := range fields {
		if dist := editDistance(strings.ToLower(name), strings.ToLower(f)); dist < bestDist || dist == bestDist && f < best {
			best, bestDist = f, dist
		}
	}
	if best == "" {
		return ""
	}
	return " (did you mean " + best + "?)"
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// render is n as short flow-style YAML, for error messages.
func render(n *yaml.Node) string {
	const limit = 60
	var b strings.Builder
	renderTo(&b, n, 0)
	if s := []rune(b.String()); len(s) > limit {
		return string(s[:limit]) + "…"
	}
	return b.String()
}

func renderTo(b *strings.Builder, n *yaml.Node, depth int) {
	if depth > 4 || b.Len() > 80 {
		b.WriteString("…")
		return
	}
	switch n.Kind {
	case yaml.ScalarNode:
		b.WriteString(n.Value)
	case yaml.AliasNode:
		b.WriteString("*" + n.Value)
	case yaml.MappingNode:
		b.WriteString("{")
		for i := 0; i+1 < len(n.Content); i += 2 {
			if i > 0 {
				b.WriteString(", ")
			}
			renderTo(b, n.Content[i], depth+1)
			b.WriteString(": ")
			renderTo(b, n.Content[i+1], depth+1)
		}
		b.WriteString("}")
	case yaml.SequenceNode:
		b.WriteString("[")
		for i, c := range n.Content {
			if i > 0 {
				b.WriteString(", ")
			}
			renderTo(b, c, depth+1)
		}
		b.WriteString("]")
	case yaml.DocumentNode:
		for _, c := range n.Content {
			renderTo(b, c, depth+1)
		}
	}
}
