package health

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeward/nodeward/api/kube"
	"github.com/nodeward/nodeward/api/v1alpha1"
)

// LeaseRenewer keeps the agent's liveness Lease
// (v1alpha1.AgentLeaseNamespace/AgentLeaseName(node)) renewed, so that the
// coordinator can tell a dead agent from a healthy node.
type LeaseRenewer struct {
	cfg   LeaseConfig
	lease *coordinationv1.Lease // last written copy, to renew without a read
}

// LeaseConfig wires a LeaseRenewer.
type LeaseConfig struct {
	Client   *kube.Client
	Node     string
	Interval time.Duration
	// Owner returns the Node once known (nil before); the Lease is then
	// created owned by the Node and garbage-collected with it. Optional.
	Owner func() *corev1.Node
	Log   *slog.Logger
	// Now is the clock written into the Lease; time.Now when nil.
	Now func() time.Time
}

// NewLeaseRenewer renews every cfg.Interval.
func NewLeaseRenewer(cfg LeaseConfig) *LeaseRenewer {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &LeaseRenewer{cfg: cfg}
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
		next := l.cfg.Interval
		if err := l.Renew(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			l.cfg.Log.Warn("renewing the liveness Lease failed", "err", err)
			next = max(l.cfg.Interval/4, 100*time.Millisecond)
		}
		timer.Reset(next)
	}
}

// Renew writes renewTime = now, creating the Lease when missing.
func (l *LeaseRenewer) Renew(ctx context.Context) error {
	leases := l.cfg.Client.Leases(v1alpha1.AgentLeaseNamespace)
	name := v1alpha1.AgentLeaseName(l.cfg.Node)
	now := metav1.NewMicroTime(l.cfg.Now())
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
	lease.Spec.HolderIdentity = ptr.To(l.cfg.Node)
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
			HolderIdentity:       ptr.To(l.cfg.Node),
			LeaseDurationSeconds: ptr.To[int32](v1alpha1.AgentLeaseDurationSeconds),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	if l.cfg.Owner != nil {
		if node := l.cfg.Owner(); node != nil && node.UID != "" {
			lease.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}}
		}
	}
	return lease
}
