package drain

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// OnTimeout is what a drain does when its overall timeout passes while pods
// still block it.
type OnTimeout string

const (
	// Retry keeps evicting and keeps reporting what blocks (default): a
	// PDB is never broken by the passing of time.
	Retry OnTimeout = "retry"
	// Yield gives up and returns ErrBlocked, so that the caller can
	// uncordon and hand its slot back.
	Yield OnTimeout = "yield"
	// Force deletes the blocking pods without the Eviction API. It breaks
	// PodDisruptionBudgets and is an explicit opt-in only.
	Force OnTimeout = "force"
	// Fail gives up and returns ErrBlocked but leaves the node cordoned,
	// as kubectl drain does when its timeout passes.
	Fail OnTimeout = "fail"
)

// ParseOnTimeout accepts fail, retry, yield and force.
func ParseOnTimeout(s string) (OnTimeout, error) {
	switch p := OnTimeout(s); p {
	case Retry, Yield, Force, Fail:
		return p, nil
	}
	return "", fmt.Errorf("on-timeout %q: must be fail, retry, yield or force", s)
}

// PodPolicy says what to do with a pod class whose eviction loses something:
// pods with emptyDir data and pods no controller will recreate.
type PodPolicy string

const (
	// Refuse stops the drain before anything is evicted and names the pods.
	Refuse PodPolicy = "refuse"
	// Evict evicts them like any other pod.
	Evict PodPolicy = "evict"
)

// ParsePodPolicy accepts refuse and evict.
func ParsePodPolicy(s string) (PodPolicy, error) {
	switch p := PodPolicy(s); p {
	case Refuse, Evict:
		return p, nil
	}
	return "", fmt.Errorf("pod policy %q: must be refuse or evict", s)
}

// Options tune a drain. The zero value is usable: it is the safe default
// (refuse emptyDir and unmanaged pods, retry forever, pods' own grace).
type Options struct {
	// Rules order the pods and may skip some or wait for them to complete.
	Rules *Rules
	// ByPriority drains by descending PriorityClass value after the
	// rules' order: critical applications move first while capacity is
	// short.
	ByPriority bool
	// EmptyDir is the policy for pods with emptyDir volumes (default Refuse).
	EmptyDir PodPolicy
	// Unmanaged is the policy for pods without a controller (default Refuse).
	Unmanaged PodPolicy
	// Concurrency bounds the evictions in flight inside a batch (default 32).
	Concurrency int
	// Timeout is the overall drain timeout (0: none); OnTimeout says what
	// happens when it passes.
	Timeout   time.Duration
	OnTimeout OnTimeout
	// GracePeriod overrides the pods' termination grace period in seconds
	// when not nil; nil keeps each pod's own, as kubectl's -1 does.
	GracePeriod *int64
	// SkipTerminatingAfter: a pod already terminating for longer than this
	// is not waited on (default 5 minutes).
	SkipTerminatingAfter time.Duration
	// RetryBackoff is the first wait after a 429 without Retry-After; it
	// doubles up to MaxRetryBackoff (defaults 1 s and 10 s).
	RetryBackoff, MaxRetryBackoff time.Duration
	// DryRun plans and reports but evicts, deletes and cordons nothing.
	DryRun bool
	// PodSelector, when not nil, limits the drain to the pods it selects;
	// the others stay on the node (kubectl drain --pod-selector).
	PodSelector labels.Selector
	// DisableEviction deletes pods instead of evicting them: PDBs are not
	// asked (kubectl drain --disable-eviction). An explicit opt-in only.
	DisableEviction bool
}

func (o Options) withDefaults() Options {
	if o.EmptyDir == "" {
		o.EmptyDir = Refuse
	}
	if o.Unmanaged == "" {
		o.Unmanaged = Refuse
	}
	if o.Concurrency == 0 {
		o.Concurrency = 32
	}
	if o.OnTimeout == "" {
		o.OnTimeout = Retry
	}
	if o.SkipTerminatingAfter == 0 {
		o.SkipTerminatingAfter = 5 * time.Minute
	}
	if o.RetryBackoff == 0 {
		o.RetryBackoff = time.Second
	}
	if o.MaxRetryBackoff == 0 {
		o.MaxRetryBackoff = 10 * time.Second
	}
	return o
}

// Validate names the first bad field.
func (o Options) Validate() error {
	var errs []error
	if _, err := ParsePodPolicy(string(o.EmptyDir)); o.EmptyDir != "" && err != nil {
		errs = append(errs, fmt.Errorf("emptyDir: %w", err))
	}
	if _, err := ParsePodPolicy(string(o.Unmanaged)); o.Unmanaged != "" && err != nil {
		errs = append(errs, fmt.Errorf("unmanaged: %w", err))
	}
	if _, err := ParseOnTimeout(string(o.OnTimeout)); o.OnTimeout != "" && err != nil {
		errs = append(errs, err)
	}
	if o.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("concurrency %d: must not be negative", o.Concurrency))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %s: must not be negative", o.Timeout))
	}
	if o.GracePeriod != nil && *o.GracePeriod < 0 {
		errs = append(errs, fmt.Errorf("grace period %d: must not be negative (leave it unset for each pod's own)", *o.GracePeriod))
	}
	if o.SkipTerminatingAfter < 0 || o.RetryBackoff < 0 || o.MaxRetryBackoff < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	return errors.Join(errs...)
}
