package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeward/nodeward/api/kube"
)

// writeTimeout bounds each node write and each check of the API.
const writeTimeout = 10 * time.Second

// errStale marks a write refused because the node changed since the plan
// read it: the node's event re-plans the pool; no backoff, no alarm.
var errStale = errors.New("node changed since it was planned")

// staleError is the API server's conflict, which is errStale.
type staleError struct{ err error }

func (e staleError) Error() string        { return errStale.Error() + ": " + e.err.Error() }
func (e staleError) Unwrap() error        { return e.err }
func (e staleError) Is(target error) bool { return target == errStale }

// patchNode merge-patches node's annotations, conditional on rv when set:
// a node changed since is errStale.
func patchNode(ctx context.Context, client *kube.Client, node, rv string, set map[string]*string) error {
	meta := map[string]any{"annotations": set}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return fmt.Errorf("encode annotations for node %s: %w", node, err)
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	_, err = client.Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("patch annotations of node %s: %w", node, staleError{err})
	case err != nil:
		return fmt.Errorf("patch annotations of node %s: %w", node, err)
	}
	return nil
}
