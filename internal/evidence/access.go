package evidence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// AccessTimeout bounds one SelfSubjectAccessReview of CheckAccess.
const AccessTimeout = 10 * time.Second

// maxReviews is how many SelfSubjectAccessReviews CheckAccess has in
// flight at once.
const maxReviews = 4

// Permission is one thing diagnose asks the API server for: a verb on a
// resource (or a subresource of it) of an API group, as an RBAC rule
// grants it. deploy/rbac/diagnose.yaml grants DiagnosePermissions(true,
// true), and its test keeps the two equal.
type Permission struct {
	// Verb is the RBAC verb: get, list, create, patch.
	Verb string
	// Group is the API group; "" is the core group.
	Group string
	// Resource is the plural resource name, e.g. "pods".
	Resource string
	// Subresource is e.g. "portforward" of pods/portforward; "" for the
	// resource itself.
	Subresource string
	// For says what diagnose needs it for, as a phrase ("read the
	// agent's output").
	For string
	// Optional: diagnose goes on without it, with less evidence.
	Optional bool
}

// String spells p as RBAC rules and `kubectl auth can-i --list` do:
// "create pods/portforward", "list endpointslices.discovery.k8s.io". (To
// check one with kubectl auth can-i, give the subresource as a flag:
// `kubectl auth can-i create pods --subresource=portforward`; there
// "pods/portforward" would name a pod called portforward.)
func (p Permission) String() string {
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	return p.Verb + " " + r
}

// DiagnosePermissions returns what diagnose asks the API server for in
// the Service's namespace. agent adds what the connection-reading agent
// needs: its state (get pods), attaching it as an ephemeral container
// (PATCH pods/ephemeralcontainers, as kubectl debug does) and reading its
// output (pods/log); required, as the caller asked for the agent. exec
// adds the fallback that reads /proc/net/tcp through pods/exec (and,
// without agent, get pods, to choose the container), optional. The slice
// is new on each call.
func DiagnosePermissions(agent, exec bool) []Permission {
	perms := []Permission{
		{Verb: "list", Resource: "services", For: "find the Service and its ports"},
		{Verb: "list", Resource: "pods", For: "find the Service's pods and its clients"},
		{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices", For: "find the Service's endpoints and which are ready"},
		{Verb: "list", Group: "apps", Resource: "deployments", For: "name the Deployment behind the Service", Optional: true},
		{Verb: "list", Group: "apps", Resource: "statefulsets", For: "name the StatefulSet behind the Service", Optional: true},
		{Verb: "create", Resource: "pods", Subresource: "portforward", For: "reach the pods' ports through the API server"},
		{Verb: "get", Resource: "pods", Subresource: "portforward", For: "reach the pods' ports over a WebSocket (else SPDY: a proxy that blocks SPDY blocks it)", Optional: true},
	}
	if agent {
		perms = append(perms,
			Permission{Verb: "get", Resource: "pods", For: "see whether a pod's agent runs"},
			Permission{Verb: "patch", Resource: "pods", Subresource: "ephemeralcontainers", For: "attach the connection-reading agent to server pods"},
			Permission{Verb: "get", Resource: "pods", Subresource: "log", For: "read the agent's output"})
	}
	if exec && !agent {
		perms = append(perms, Permission{Verb: "get", Resource: "pods", For: "find the server container to read /proc/net/tcp in", Optional: true})
	}
	if exec {
		perms = append(perms, Permission{Verb: "create", Resource: "pods", Subresource: "exec", For: "read /proc/net/tcp in server pods (open connections) when no agent runs", Optional: true})
	}
	return perms
}

// CheckAccess asks the API server whether the current user (the
// kubeconfig's, after any impersonation cs is configured with) may do
// each of perms in namespace, as `kubectl auth can-i` does: one
// SelfSubjectAccessReview per permission, at most 4 in flight, each
// bounded by AccessTimeout. It returns the permissions denied, in the
// order given; a review answered with allowed=false is a denied
// permission, not an error. It errs only when the reviews cannot be
// made (the API server does not answer, or RBAC forbids creating
// selfsubjectaccessreviews), or with ctx's error when ctx ends first.
func CheckAccess(ctx context.Context, cs kubernetes.Interface, namespace string, perms []Permission) ([]Permission, error) {
	allowed, errs := reviewAll(ctx, cs, namespace, perms)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: checking access: %w", err)
	}
	var denied []Permission
	for i, p := range perms {
		if errs[i] != nil {
			return nil, reviewError(p, errs[i])
		}
		if !allowed[i] {
			denied = append(denied, p)
		}
	}
	return denied, nil
}

// reviewAll runs a review per permission, at most maxReviews at once, and
// returns each answer and error in perms' order. It starts none once ctx
// has ended and returns when the started ones have.
func reviewAll(ctx context.Context, cs kubernetes.Interface, namespace string, perms []Permission) ([]bool, []error) {
	allowed, errs := make([]bool, len(perms)), make([]error, len(perms))
	slots := make(chan struct{}, maxReviews)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, p := range perms {
		if ctx.Err() != nil {
			return allowed, errs
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return allowed, errs
		}
		wg.Go(func() {
			defer func() { <-slots }()
			allowed[i], errs[i] = review(ctx, cs, namespace, p)
		})
	}
	return allowed, errs
}

// review asks whether the current user may do p in namespace.
func review(ctx context.Context, cs kubernetes.Interface, namespace string, p Permission) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, AccessTimeout)
	defer cancel()
	sar := &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace:   namespace,
				Verb:        p.Verb,
				Group:       p.Group,
				Resource:    p.Resource,
				Subresource: p.Subresource,
			},
		},
	}
	got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return got.Status.Allowed, nil
}

// reviewError says why the review of p could not be made.
func reviewError(p Permission, err error) error {
	const what = "create selfsubjectaccessreviews.authorization.k8s.io"
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("evidence: checking access (%s): the API server forbids %s (RBAC; the default system:basic-user role grants it): %w", p, what, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("evidence: checking access (%s): the API server refused the kubeconfig's credentials to %s (expired?): %w", p, what, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("evidence: checking access (%s): the API server did not answer %s within %v: %w", p, what, AccessTimeout, err)
	}
	return fmt.Errorf("evidence: checking access (%s): could not %s (the API server, or RBAC for selfsubjectaccessreviews): %w", p, what, err)
}
