package metricsauth

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// reviewer posts TokenReviews and SubjectAccessReviews. Two small REST
// clients on a scheme of the two group versions, not client-go's clientset
// (package kube says why: agent RSS).
type reviewer struct {
	authn rest.Interface
	authz rest.Interface
}

func newReviewer(cfg *rest.Config) (*reviewer, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{authnv1.AddToScheme, authzv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("metrics auth scheme: %w", err)
		}
	}
	config := rest.CopyConfig(cfg)
	if config.RateLimiter == nil && config.QPS > 0 && config.Burst > 0 {
		config.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(config.QPS, config.Burst)
	}
	httpClient, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("metrics auth client: %w", err)
	}
	codecs := serializer.NewCodecFactory(s)
	r := &reviewer{}
	for _, g := range []struct {
		dst *rest.Interface
		gv  schema.GroupVersion
	}{
		{&r.authn, authnv1.SchemeGroupVersion},
		{&r.authz, authzv1.SchemeGroupVersion},
	} {
		gc := rest.CopyConfig(config)
		gv := g.gv
		gc.GroupVersion, gc.APIPath = &gv, "/apis"
		gc.NegotiatedSerializer = codecs.WithoutConversion()
		rc, err := rest.RESTClientForConfigAndClient(gc, httpClient)
		if err != nil {
			return nil, fmt.Errorf("metrics auth client for %s: %w", gv, err)
		}
		*g.dst = rc
	}
	return r, nil
}

// authenticate sends a TokenReview; it returns the user, or nil when the
// API server does not accept the token.
func (r *reviewer) authenticate(ctx context.Context, token string, audiences []string) (*authnv1.UserInfo, error) {
	review := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: audiences}}
	out := &authnv1.TokenReview{}
	if err := r.authn.Post().Resource("tokenreviews").Body(review).Do(ctx).Into(out); err != nil {
		// client-go's errors quote a response body that is not a Status;
		// never let one carry the token into a log.
		if strings.Contains(err.Error(), token) {
			err = errors.New(strings.ReplaceAll(err.Error(), token, "[token]"))
		}
		return nil, fmt.Errorf("TokenReview: %w", err)
	}
	if !out.Status.Authenticated {
		return nil, nil
	}
	return &out.Status.User, nil
}

// authorize sends a SubjectAccessReview of user for verb on the
// non-resource URL path.
func (r *reviewer) authorize(ctx context.Context, user *authnv1.UserInfo, verb, path string) (bool, error) {
	extra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	review := &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{
			User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: verb},
		},
	}
	out := &authzv1.SubjectAccessReview{}
	if err := r.authz.Post().Resource("subjectaccessreviews").Body(review).Do(ctx).Into(out); err != nil {
		return false, fmt.Errorf("SubjectAccessReview: %w", err)
	}
	return out.Status.Allowed, nil
}
