package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// LeaderTerm names one leadership of the coordinators' leader Lease: the
// Lease (namespace/name and UID, so that a Lease deleted and created again
// starts new terms), its transition count, which grows by one at every
// change of holder, and the holder. It is the fencing token of a grant
// (AnnotationGrantTerm): a term that is not the Lease's current one belongs
// to a deposed leader.
type LeaderTerm struct {
	// Lease is "<namespace>/<name>".
	Lease       string `json:"lease"`
	UID         string `json:"uid"`
	Transitions int32  `json:"transitions"`
	Holder      string `json:"holder"`
}

// TermOf is the term lease is in.
func TermOf(lease *coordinationv1.Lease) LeaderTerm {
	t := LeaderTerm{Lease: lease.Namespace + "/" + lease.Name, UID: string(lease.UID)}
	if lease.Spec.LeaseTransitions != nil {
		t.Transitions = *lease.Spec.LeaseTransitions
	}
	if lease.Spec.HolderIdentity != nil {
		t.Holder = *lease.Spec.HolderIdentity
	}
	return t
}

// String is the annotation value: compact JSON.
func (t LeaderTerm) String() string {
	b, err := json.Marshal(t)
	if err != nil {
		panic(fmt.Sprintf("encode leader term: %v", err)) // a struct of strings and an int always encodes
	}
	return string(b)
}

// LeaseNamespaceName splits Lease; Validate has checked it.
func (t LeaderTerm) LeaseNamespaceName() (namespace, name string) {
	namespace, name, _ = strings.Cut(t.Lease, "/")
	return namespace, name
}

// Validate says what is wrong with t, naming the field.
func (t LeaderTerm) Validate() error {
	ns, name, ok := strings.Cut(t.Lease, "/")
	switch {
	case !ok || ns == "" || name == "" || strings.Contains(name, "/"):
		return fmt.Errorf("lease %q: want <namespace>/<name>", t.Lease)
	case t.UID == "":
		return errors.New("uid: empty")
	case t.Transitions < 0:
		return fmt.Errorf("transitions %d: want 0 or more", t.Transitions)
	case t.Holder == "":
		return errors.New("holder: empty")
	}
	return nil
}

// ParseLeaderTerm reads an AnnotationGrantTerm value; the error names the
// field that is wrong.
func ParseLeaderTerm(value string) (LeaderTerm, error) {
	var t LeaderTerm
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return LeaderTerm{}, fmt.Errorf("leader term %q: want JSON with lease, uid, transitions and holder: %w", value, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return LeaderTerm{}, fmt.Errorf("leader term %q: trailing data after the JSON object", value)
	}
	if err := t.Validate(); err != nil {
		return LeaderTerm{}, fmt.Errorf("leader term %q: %w", value, err)
	}
	return t, nil
}
