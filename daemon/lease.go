package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// LeaseRenewer keeps the agent's liveness Lease
// (v1alpha1.AgentLeaseNamespace/AgentLeaseName(node)) renewed, so that the
// coordinator can tell a dead agent from a healthy node.
type LeaseRenewer struct {
	client   *kube.Client
	node     string
	interval time.Duration
	// owner returns the Node's name and UID once known; the Lease is then
	// owned by the Node and garbage-collected with it.
	owner func() (name, uid string)
	log   *slog.Logger

	lease *coordinationv1.Lease // last written copy, to renew without a read
}

// NewLeaseRenewer renews every interval; owner may be nil.
func NewLeaseRenewer(client *kube.Client, node string, interval time.Duration, owner func() (string, string), log *slog.Logger) *LeaseRenewer {
	return &LeaseRenewer{client: client, node: node, interval: interval, owner: owner, log: log}
}

// Run renews until ctx ends. A failed renewal is retried sooner (a quarter
// interval) so that one lost request does not let the Lease lapse.
func (l *LeaseRenewer) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		next := l.interval
		if err := l.Renew(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			l.log.Warn("renewing the liveness Lease failed", "node", l.node, "err", err)
			next = max(l.interval/4, 100*time.Millisecond)
		}
		timer.Reset(next)
	}
}

// Renew writes renewTime = now, creating the Lease when missing.
func (l *LeaseRenewer) Renew(ctx context.Context) error {
	leases := l.client.Leases(v1alpha1.AgentLeaseNamespace)
	name := v1alpha1.AgentLeaseName(l.node)
	now := metav1.NewMicroTime(time.Now())
	if l.lease == nil {
		existing, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := leases.Create(ctx, l.newLease(name, now), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create Lease %s/%s: %w", v1alpha1.AgentLeaseNamespace, name, err)
			}
			l.lease = created
			return nil
		case err != nil:
			return fmt.Errorf("read Lease %s/%s: %w", v1alpha1.AgentLeaseNamespace, name, err)
		}
		l.lease = existing
	}
	lease := l.lease.DeepCopy()
	lease.Spec.HolderIdentity = ptr.To(l.node)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](v1alpha1.AgentLeaseDurationSeconds)
	lease.Spec.RenewTime = &now
	updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		l.lease = nil // read it again next time (conflict, deletion)
		return fmt.Errorf("renew Lease %s/%s: %w", v1alpha1.AgentLeaseNamespace, name, err)
	}
	l.lease = updated
	return nil
}

func (l *LeaseRenewer) newLease(name string, now metav1.MicroTime) *coordinationv1.Lease {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1alpha1.AgentLeaseNamespace},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(l.node),
			LeaseDurationSeconds: ptr.To[int32](v1alpha1.AgentLeaseDurationSeconds),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	if l.owner != nil {
		if nodeName, uid := l.owner(); uid != "" {
			lease.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: nodeName, UID: types.UID(uid),
			}}
		}
	}
	return lease
}
