// Package objectgate evaluates an UpdatePool's object gates: CEL
// expressions over Kubernetes objects the coordinator watches (a storage
// cluster's health, say), as gate evaluates the Prometheus gates.
//
// Like those, they fail closed: an object that is missing, none matching
// (unless the gate allows it), a watch not synced, a list the coordinator
// is forbidden, an expression that does not compile or fails at runtime
// (the cost limit included) all hold grants, with a reason that says which
// and a message naming the pool, the gate and the object. The CRD cannot
// check the expressions at admission (its own CEL rules cannot compile
// CEL), so a broken one shows in the pool's status instead, and is never
// taken for true.
//
// The package is a leaf: the API types, the gate package's Verdict, the
// dynamic client and cel-go.
package objectgate

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodeward/nodeward/api/v1alpha1"
	"github.com/nodeward/nodeward/gate"
)

// The reasons of an object gate's Verdict, fit for a condition's reason.
const (
	// ReasonExpressionInvalid: the expression does not compile or is not
	// of type bool; it is never evaluated.
	ReasonExpressionInvalid = "ObjectExpressionInvalid"
	// ReasonExpressionFailed: the expression failed on an object (a
	// missing field, the cost limit exceeded).
	ReasonExpressionFailed = "ObjectExpressionFailed"
	// ReasonObjectFailing: the expression is false for an object.
	ReasonObjectFailing = "ObjectGateFailing"
	// ReasonObjectMissing: the named object does not exist.
	ReasonObjectMissing = "ObjectMissing"
	// ReasonNoObjects: the selector matches no object, and the gate does
	// not allow none.
	ReasonNoObjects = "NoObjectsMatch"
	// ReasonForbidden: the coordinator may not list the objects.
	ReasonForbidden = "ObjectsForbidden"
	// ReasonUnreadable: listing the objects failed otherwise (the
	// resource not served, say).
	ReasonUnreadable = "ObjectsUnreadable"
	// ReasonNotSynced: the watch has not listed the objects yet.
	ReasonNotSynced = "ObjectsNotSynced"
)

// Evaluator evaluates object gates from Watches with Programs.
type Evaluator struct {
	Programs *Programs
	Watches  *Watches
}

// KeyOf is the watch an object gate reads.
func KeyOf(g v1alpha1.ObjectGate) Key {
	return Key{Resource: schema.GroupVersionResource{Group: g.Group, Version: g.Version, Resource: g.Resource}, Namespace: g.Namespace}
}

// Evaluate checks pool's object gates in order; the first that does not
// pass decides the verdict. None: passing.
func (e *Evaluator) Evaluate(pool string, gates []v1alpha1.ObjectGate) gate.Verdict {
	objects := 0
	for i, g := range gates {
		n, v := e.one(pool, i, g)
		if !v.Passing {
			return v
		}
		objects += n
	}
	return gate.Verdict{Passing: true, Reason: gate.ReasonPassing,
		Message: fmt.Sprintf("%d object gates passing on %d objects", len(gates), objects)}
}

// one evaluates gates.objects[i], returning how many objects passed.
func (e *Evaluator) one(pool string, i int, g v1alpha1.ObjectGate) (int, gate.Verdict) {
	field := fmt.Sprintf("pool %s gates.objects[%d]", pool, i)
	fail := func(reason, format string, args ...any) (int, gate.Verdict) {
		return 0, gate.Verdict{Reason: reason, Message: field + " (" + describe(g) + "): " + fmt.Sprintf(format, args...)}
	}
	prg, err := e.Programs.Get(g.Expression)
	if err != nil {
		return fail(ReasonExpressionInvalid, "expression %q does not compile: %v", g.Expression, err)
	}
	sel, err := selector(g)
	if err != nil {
		return fail(gate.ReasonGateInvalid, "%v", err)
	}
	w := e.Watches.ensure(KeyOf(g))
	if reason, msg := readable(w, g); reason != "" {
		return fail(reason, "%s", msg)
	}
	objs := matching(w, g, sel)
	switch {
	case len(objs) == 0 && g.Name != "":
		if where := namespacesOf(w, g); len(where) > 0 {
			return fail(ReasonObjectMissing, "%s not found as a cluster-scoped object, but objects of that name are in namespace %s: set the gate's namespace",
				g.Name, strings.Join(where, ", "))
		}
		return fail(ReasonObjectMissing, "%s not found", g.Name)
	case len(objs) == 0 && !g.AllowNone:
		return fail(ReasonNoObjects, "no object matches (allowNone is false)")
	}
	for _, o := range objs {
		ok, err := Eval(prg, o.Object)
		switch {
		case err != nil:
			return fail(ReasonExpressionFailed, "%s: expression %q failed: %v", objectName(o), g.Expression, err)
		case !ok:
			return fail(ReasonObjectFailing, "%s: %s", objectName(o), failMessage(g))
		}
	}
	return len(objs), gate.Verdict{Passing: true}
}

// readable says why w's cache cannot be trusted, if it cannot: a reason
// and a message, empty when it can.
func readable(w *watched, g v1alpha1.ObjectGate) (reason, msg string) {
	if w == nil {
		return ReasonNotSynced, "the coordinator is not watching yet"
	}
	if err := w.lastListErr(); err != nil {
		if apierrors.IsForbidden(err) {
			return ReasonForbidden, fmt.Sprintf("the coordinator may not list %s: grant it %s (docs/guardrails.md, \"Object gates\"): %v",
				describe(g), permission(g), err)
		}
		return ReasonUnreadable, fmt.Sprintf("listing failed: %v", err)
	}
	if !w.informer.HasSynced() {
		return ReasonNotSynced, "the watch has not listed the objects yet"
	}
	return "", ""
}

// permission is the RBAC rule the gate needs, as an operator writes it.
func permission(g v1alpha1.ObjectGate) string {
	where := "cluster-wide (a ClusterRole and ClusterRoleBinding)"
	if g.Namespace != "" {
		where = "in namespace " + g.Namespace
	}
	return fmt.Sprintf("apiGroups [%q] resources [%q] verbs [get list watch] %s", g.Group, g.Resource, where)
}

// matching returns the cached objects g selects, sorted by key.
func matching(w *watched, g v1alpha1.ObjectGate, sel labels.Selector) []*unstructured.Unstructured {
	store := w.informer.GetStore()
	if g.Name != "" {
		key := g.Name
		if g.Namespace != "" {
			key = g.Namespace + "/" + g.Name
		}
		obj, ok, _ := store.GetByKey(key) // a cache's GetByKey never fails
		if !ok {
			return nil
		}
		return []*unstructured.Unstructured{obj.(*unstructured.Unstructured)}
	}
	var out []*unstructured.Unstructured
	for _, key := range sortedKeys(store) {
		obj, ok, _ := store.GetByKey(key)
		if u, isU := obj.(*unstructured.Unstructured); ok && isU && sel.Matches(labels.Set(u.GetLabels())) {
			out = append(out, u)
		}
	}
	return out
}

// namespacesOf lists the namespaces holding an object named g.Name when
// the gate gives a name but no namespace: on a namespaced resource such a
// gate finds nothing (the watch's keys are namespace/name), and saying
// where the object is beats "not found".
func namespacesOf(w *watched, g v1alpha1.ObjectGate) []string {
	if g.Namespace != "" {
		return nil
	}
	var where []string
	for _, key := range sortedKeys(w.informer.GetStore()) {
		if ns, name, ok := strings.Cut(key, "/"); ok && name == g.Name {
			where = append(where, ns)
		}
	}
	return where
}

// selector parses g's selector; everything when nil. Name and selector
// together are refused.
func selector(g v1alpha1.ObjectGate) (labels.Selector, error) {
	if g.Name != "" && g.Selector != nil {
		return nil, errors.New("name and selector both given: give one")
	}
	if g.Selector == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(g.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector: %w", err)
	}
	return sel, nil
}

// describe names the gate's resource as kubectl does (resource.group) and
// its namespace.
func describe(g v1alpha1.ObjectGate) string {
	s := g.Resource
	if g.Group != "" {
		s += "." + g.Group
	}
	if g.Namespace != "" {
		s += " in " + g.Namespace
	}
	return s
}

func objectName(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

func failMessage(g v1alpha1.ObjectGate) string {
	if strings.TrimSpace(g.Message) != "" {
		return g.Message
	}
	return fmt.Sprintf("expression %q is false", g.Expression)
}
