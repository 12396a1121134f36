package evidence_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/evidence/evidencetest"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// rbacFile is the RBAC that grants DiagnosePermissions(true, false).
const rbacFile = "../../deploy/rbac/diagnose.yaml"

// asked returns the permission a SelfSubjectAccessReview asks about, and
// its namespace.
func asked(a k8stesting.Action) (evidence.Permission, string) {
	ra := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).Spec.ResourceAttributes
	return evidence.Permission{Verb: ra.Verb, Group: ra.Group, Resource: ra.Resource, Subresource: ra.Subresource}, ra.Namespace
}

// reviewer returns a clientset whose API server answers each
// SelfSubjectAccessReview with allowed unless the permission's String is
// in deny, or fails it with err when err is not nil. It records the
// namespaces asked about in namespaces.
func reviewer(deny []string, err error, namespaces *[]string) *fake.Clientset {
	cs := fake.NewClientset()
	var mu sync.Mutex
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p, ns := asked(a)
		mu.Lock()
		*namespaces = append(*namespaces, ns)
		mu.Unlock()
		if err != nil {
			return true, nil, err
		}
		sar := &authorizationv1.SelfSubjectAccessReview{}
		sar.Status.Allowed = !slices.Contains(deny, p.String())
		if !sar.Status.Allowed {
			sar.Status.Reason = "no RBAC policy matched"
		}
		return true, sar, nil
	})
	return cs
}

func TestCheckAccess(t *testing.T) {
	ssar := schema.GroupResource{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"}
	tests := []struct {
		name        string
		agent, exec bool
		deny        []string
		err         error
		want        []string // the denied permissions' Strings
		wantErr     []string // what the error says
	}{
		{name: "all allowed", agent: true, exec: true},
		{name: "portforward denied", agent: true, exec: true, deny: []string{"create pods/portforward"}, want: []string{"create pods/portforward"}},
		{name: "denied in the order given", agent: true, exec: true,
			deny: []string{"create pods/exec", "get pods/log", "list deployments.apps", "list endpointslices.discovery.k8s.io"},
			want: []string{"list endpointslices.discovery.k8s.io", "list deployments.apps", "get pods/log", "create pods/exec"}},
		{name: "only what was asked", deny: []string{"create pods/exec", "patch pods/ephemeralcontainers"}},
		{name: "reviews fail", agent: true, err: errors.New("connection refused"),
			wantErr: []string{"selfsubjectaccessreviews", "connection refused"}},
		{name: "reviews forbidden", err: apierrors.NewForbidden(ssar, "", errors.New("no")),
			wantErr: []string{"forbids create selfsubjectaccessreviews", "RBAC"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var namespaces []string
			perms := evidence.DiagnosePermissions(tt.agent, tt.exec)
			denied, err := evidence.CheckAccess(context.Background(), reviewer(tt.deny, tt.err, &namespaces), "shop", perms)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("CheckAccess = %v, nil; want an error", denied)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("CheckAccess: %v", err)
			}
			var got []string
			for _, p := range denied {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("denied (-want +got):\n%s", diff)
			}
			if want := slices.Repeat([]string{"shop"}, len(perms)); !slices.Equal(namespaces, want) {
				t.Errorf("reviewed in namespaces %q, want %d times shop", namespaces, len(perms))
			}
		})
	}
}

// TestCheckAccessCancelled: CheckAccess returns ctx's error, promptly,
// when ctx ends before the reviews are answered or before they start.
func TestCheckAccessCancelled(t *testing.T) {
	tests := []struct {
		name   string
		before bool // cancel before CheckAccess starts
	}{
		{name: "while a review waits"},
		{name: "before", before: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			started, once := make(chan struct{}), sync.Once{}
			var reviews atomic.Int32
			cs := fake.NewClientset()
			cs.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
				reviews.Add(1)
				once.Do(func() { close(started) })
				<-ctx.Done() // an API server that does not answer; the client gives up with ctx
				return true, nil, ctx.Err()
			})
			if tt.before {
				cancel()
			}
			done := make(chan error, 1)
			go func() {
				_, err := evidence.CheckAccess(ctx, cs, "shop", evidence.DiagnosePermissions(true, true))
				done <- err
			}()
			if !tt.before {
				<-started
				cancel()
			}
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("CheckAccess = %v, want context.Canceled", err)
				}
				if n := reviews.Load(); tt.before && n != 0 {
					t.Errorf("%d reviews made with ctx cancelled before, want none", n)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("CheckAccess still running 5s after ctx was cancelled")
			}
		})
	}
}

func TestPermissionString(t *testing.T) {
	tests := []struct {
		name string
		p    evidence.Permission
		want string
	}{
		{name: "core", p: evidence.Permission{Verb: "list", Resource: "pods"}, want: "list pods"},
		{name: "subresource", p: evidence.Permission{Verb: "create", Resource: "pods", Subresource: "portforward"}, want: "create pods/portforward"},
		{name: "group", p: evidence.Permission{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices"}, want: "list endpointslices.discovery.k8s.io"},
		{name: "group and subresource", p: evidence.Permission{Verb: "patch", Group: "apps", Resource: "deployments", Subresource: "scale"}, want: "patch deployments.apps/scale"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestAccessRBACFile: deploy/rbac/diagnose.yaml decodes into RBAC objects
// and its ClusterRole grants exactly DiagnosePermissions(true, false).
func TestAccessRBACFile(t *testing.T) {
	role, binding := evidencetest.ReadRBAC(t, rbacFile)
	var got []string
	for _, r := range role.Rules {
		got = append(got, ruleGrants(t, r)...)
	}
	var want []string
	for _, p := range evidence.DiagnosePermissions(true, false) {
		want = append(want, p.String())
	}
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s grants (-DiagnosePermissions +file):\n%s", rbacFile, diff)
	}
	if role.Name != "pinlab-diagnose" {
		t.Errorf("ClusterRole is named %q, want pinlab-diagnose", role.Name)
	}
	wantRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}
	if binding.RoleRef != wantRef || binding.Namespace != "shop" || len(binding.Subjects) != 1 {
		t.Errorf("RoleBinding %s/%s refers to %+v with %d subjects, want %+v in shop with one", binding.Namespace, binding.Name, binding.RoleRef, len(binding.Subjects), wantRef)
	}
}

// ruleGrants returns what r grants, each as Permission.String spells it.
func ruleGrants(t *testing.T, r rbacv1.PolicyRule) []string {
	t.Helper()
	if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
		t.Errorf("rule %+v names resources or URLs; diagnose's rules do not", r)
	}
	var out []string
	for _, g := range r.APIGroups {
		for _, res := range r.Resources {
			resource, sub, _ := strings.Cut(res, "/")
			for _, v := range r.Verbs {
				out = append(out, evidence.Permission{Verb: v, Group: g, Resource: resource, Subresource: sub}.String())
			}
		}
	}
	return out
}
