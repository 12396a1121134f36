package cluster

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestTokenRequest: the embedded API server issues service-account tokens
// as kube-apiserver does, refusing what it refuses.
func TestTokenRequest(t *testing.T) {
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cs := c.Client().CoreV1()
	for _, name := range []string{"xds", "other"} {
		if _, err := cs.ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := cs.Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "xds-0"},
		Spec: corev1.PodSpec{ServiceAccountName: "xds", Containers: []corev1.Container{{Name: "xds", Image: "pinlab"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secs := func(s int64) *int64 { return &s }
	bound := func(name string, uid types.UID) *authenticationv1.BoundObjectReference {
		return &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: name, UID: uid}
	}
	tests := []struct {
		name    string
		sa      string
		spec    authenticationv1.TokenRequestSpec
		wantErr func(error) bool
		life    time.Duration
	}{
		{name: "default length", sa: "xds", life: time.Hour},
		{name: "bound to the pod", sa: "xds", spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: secs(3607), BoundObjectRef: bound("xds-0", p.UID)}, life: 3607 * time.Second},
		{name: "no such service account", sa: "nobody", wantErr: apierrors.IsNotFound},
		{name: "under ten minutes", sa: "xds", spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: secs(599)}, wantErr: apierrors.IsInvalid},
		{name: "the service account first", sa: "nobody", spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: secs(599)}, wantErr: apierrors.IsNotFound},
		{name: "over 2^32 seconds", sa: "xds", spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: secs(1<<32 + 1)}, wantErr: apierrors.IsInvalid},
		{name: "another service account's pod", sa: "other", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound("xds-0", p.UID)}, wantErr: apierrors.IsBadRequest},
		{name: "bound to a ConfigMap", sa: "xds", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "ConfigMap", Name: "x"}}, wantErr: apierrors.IsBadRequest},
		{name: "no such pod", sa: "xds", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound("xds-1", "")}, wantErr: apierrors.IsNotFound},
		{name: "the pod made again", sa: "xds", spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound("xds-0", "an-older-uid")}, wantErr: apierrors.IsConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now()
			got, err := cs.ServiceAccounts("default").CreateToken(ctx, tt.sa, &authenticationv1.TokenRequest{Spec: tt.spec}, metav1.CreateOptions{})
			if tt.wantErr != nil {
				if !tt.wantErr(err) {
					t.Fatalf("error %v, want another", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Status.Token) < 32 {
				t.Errorf("token %q", got.Status.Token)
			}
			if life := got.Status.ExpirationTimestamp.Sub(before); life < tt.life-2*time.Second || life > tt.life+2*time.Second {
				t.Errorf("expires in %v, want %v", life, tt.life)
			}
		})
	}
}
