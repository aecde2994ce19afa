package disruption

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// FieldError is malformed MachineConfiguration content: Field is the path
// of the offending value, e.g.
// status.nodeDisruptionPolicyStatus.clusterPolicies.files[2].actions[0].type.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

const (
	statusPath = "status.nodeDisruptionPolicyStatus.clusterPolicies"
	specPath   = "spec.nodeDisruptionPolicy"
)

// PoliciesFrom reads the cluster policies from an unstructured
// MachineConfiguration (operator.openshift.io/v1), at
// status.nodeDisruptionPolicyStatus.clusterPolicies. Missing sections are
// empty policies, as the daemon reads them: every change then reboots. Check
// Ready first: the daemon uses the status only once it is current.
func PoliciesFrom(obj map[string]any) (Policies, error) {
	m, err := walk(obj, "status", "nodeDisruptionPolicyStatus", "clusterPolicies")
	if err != nil || m == nil {
		return Policies{}, err
	}
	return readPolicies(m, statusPath, true)
}

// MergePolicies reads the user's policies from the spec of a
// MachineConfiguration (its spec.nodeDisruptionPolicy) and merges them over
// DefaultPolicies, giving what the operator publishes in status. The spec
// may not name the Special action.
func MergePolicies(spec map[string]any) (Policies, error) {
	m, err := walk(map[string]any{"spec": spec}, "spec", "nodeDisruptionPolicy")
	if err != nil {
		return Policies{}, err
	}
	user := Policies{}
	if m != nil {
		if user, err = readPolicies(m, specPath, false); err != nil {
			return Policies{}, err
		}
	}
	return Merge(DefaultPolicies(), user), nil
}

// Ready reports whether the daemon would use the object's policies: the
// object exists and the operator has observed its latest generation
// (metadata.generation == status.observedGeneration). Otherwise reason says
// why, in the daemon's terms: the status is not up to date, so the policies
// may not yet reflect the spec.
func Ready(obj map[string]any) (bool, string) {
	if obj == nil {
		return false, "MachineConfiguration/cluster has not been created yet"
	}
	gen, err := intAt(obj, "metadata", "generation")
	if err != nil {
		return false, err.Error()
	}
	seen, err := intAt(obj, "status", "observedGeneration")
	if err != nil {
		return false, err.Error()
	}
	if gen != seen {
		return false, fmt.Sprintf("NodeDisruptionPolicyStatus is not up to date: the operator has observed generation %d of MachineConfiguration/cluster, which is at generation %d", seen, gen)
	}
	return true, ""
}

// walk follows keys through nested objects; a missing key is (nil, nil), a
// value that is not an object an error.
func walk(obj map[string]any, keys ...string) (map[string]any, error) {
	m, path := obj, ""
	for _, k := range keys {
		path = join(path, k)
		v, ok := m[k]
		if !ok || v == nil {
			return nil, nil
		}
		if m, ok = v.(map[string]any); !ok {
			return nil, fieldErr(path, "want an object, have %s", kind(v))
		}
	}
	return m, nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// intAt reads an integer field; missing is 0, as in the typed object.
func intAt(obj map[string]any, keys ...string) (int64, error) {
	m, err := walk(obj, keys[:len(keys)-1]...)
	if err != nil || m == nil {
		return 0, err
	}
	last := keys[len(keys)-1]
	path := join(joinAll(keys[:len(keys)-1]), last)
	switch v := m[last].(type) {
	case nil:
		return 0, nil
	case int64:
		return v, nil
	case int:
		return int64(v), nil
	case float64:
		if v != math.Trunc(v) || math.Abs(v) > 1<<53 {
			return 0, fieldErr(path, "want an integer, have %v", v)
		}
		return int64(v), nil
	case json.Number:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return 0, fieldErr(path, "want an integer, have %s", v)
		}
		return n, nil
	default:
		return 0, fieldErr(path, "want an integer, have %s", kind(v))
	}
}

func joinAll(keys []string) string {
	path := ""
	for _, k := range keys {
		path = join(path, k)
	}
	return path
}

// kind names a JSON value's type for error messages.
func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, int64, int, json.Number:
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}
