package kube

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
)

// RetryOnConflict is client-go's retry.RetryOnConflict without its loss of
// errors: client-go returns nil when fn fails with an error that wraps a
// context's deadline or cancellation (a --request-timeout passing, a
// client timeout), because it mistakes it for its own backoff being
// interrupted. Here fn's last error is returned.
func RetryOnConflict(backoff wait.Backoff, fn func() error) error {
	var last error
	err := retry.OnError(backoff, apierrors.IsConflict, func() error {
		last = fn()
		return last
	})
	if err == nil {
		return last
	}
	return err
}
