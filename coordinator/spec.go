package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// ConfigName names a pool's target: a short hash of image and kernel
// arguments, so that any change to either is a new rollout.
func ConfigName(spec v1alpha1.UpdatePoolSpec) string {
	h := sha256.New()
	h.Write([]byte(spec.OSImage))
	for _, k := range spec.KernelArguments {
		h.Write([]byte{0})
		h.Write([]byte(k))
	}
	return "nodeward-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// MaxUnavailable resolves the pool's budget over n nodes: an integer as is,
// a percentage rounded down but at least 1 ("0%" is 0: no grants), and
// never above 1 for the control-plane pool.
func MaxUnavailable(spec v1alpha1.UpdatePoolSpec, n int) (int, error) {
	limit := 1
	if mu := spec.MaxUnavailable; mu != nil {
		switch mu.Type {
		case intstr.Int:
			if mu.IntVal < 0 {
				return 0, fmt.Errorf("maxUnavailable %d: must not be negative", mu.IntVal)
			}
			limit = int(mu.IntVal)
		case intstr.String:
			p, ok := percent(mu.StrVal)
			if !ok {
				return 0, fmt.Errorf("maxUnavailable %q: want an integer or a percentage from 0%% to 100%%", mu.StrVal)
			}
			limit = 0
			if p > 0 {
				limit = max(1, int(math.Floor(float64(n)*float64(p)/100)))
			}
		}
	}
	if spec.ControlPlane {
		limit = min(limit, 1)
	}
	return limit, nil
}

// percent reads a percentage from 0% to 100% ("25%" is 25).
func percent(s string) (int, bool) {
	digits, ok := strings.CutSuffix(s, "%")
	var p int
	if _, err := fmt.Sscanf(digits, "%d", &p); !ok || err != nil || p < 0 || p > 100 {
		return 0, false
	}
	return p, true
}
