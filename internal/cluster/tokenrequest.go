package cluster

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"
)

var serviceAccountsGVR = corev1.SchemeGroupVersion.WithResource("serviceaccounts")

// minTokenSeconds is the shortest token kube-apiserver issues (its
// TokenRequest validation: 10 minutes); defaultTokenSeconds the length it
// gives when a request names none.
const (
	minTokenSeconds     = 600
	defaultTokenSeconds = 3600
)

// createToken answers TokenRequest (create serviceaccounts/token) as
// kube-apiserver's token storage does: the service account must exist
// (404), then the request is validated (the length defaults to an hour,
// and must be at least ten minutes and at most 2^32 seconds: 422
// Invalid); a bound object must be a Pod, Secret or Node that exists with
// the UID the reference names (a pod deleted and made again is another),
// and a bound Pod must run as that service account (its
// serviceAccountName; an empty one counts as "default", which the
// ServiceAccount admission plugin, not run here, would have written). The token is random and opaque: the embedded API
// server authenticates no requests, so nothing checks it.
func (c *Cluster) createToken(action k8stesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() != "token" {
		return false, nil, nil
	}
	ca := action.(k8stesting.CreateActionImpl)
	req, ok := ca.GetObject().(*authenticationv1.TokenRequest)
	if !ok {
		return true, nil, apierrors.NewBadRequest(fmt.Sprintf("want a TokenRequest, not %T", ca.GetObject()))
	}
	ns := action.GetNamespace()
	if _, err := c.tracker().Get(serviceAccountsGVR, ns, ca.Name); err != nil {
		return true, nil, apierrors.NewNotFound(serviceAccountsGVR.GroupResource(), ca.Name)
	}
	out := req.DeepCopy()
	secs := int64(defaultTokenSeconds)
	if out.Spec.ExpirationSeconds != nil {
		secs = *out.Spec.ExpirationSeconds
	}
	path := field.NewPath("spec", "expirationSeconds")
	switch {
	case secs < minTokenSeconds:
		return true, nil, tokenInvalid(field.Invalid(path, secs, "may not specify a duration less than 10 minutes"))
	case secs > maxTokenSeconds:
		return true, nil, tokenInvalid(field.Invalid(path, secs, "may not specify a duration larger than 2^32 seconds"))
	}
	if ref := out.Spec.BoundObjectRef; ref != nil {
		if err := c.boundObject(ns, ca.Name, ref); err != nil {
			return true, nil, err
		}
	}
	b := make([]byte, 32)
	rand.Read(b)
	out.Spec.ExpirationSeconds = &secs
	out.Status = authenticationv1.TokenRequestStatus{
		Token:               base64.RawURLEncoding.EncodeToString(b),
		ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Duration(secs) * time.Second)),
	}
	return true, out, nil
}

// maxTokenSeconds is the longest token kube-apiserver's validation takes.
const maxTokenSeconds = 1 << 32

// tokenInvalid is kube-apiserver's 422 for a TokenRequest failing
// validation.
func tokenInvalid(e *field.Error) error {
	return apierrors.NewInvalid(authenticationv1.SchemeGroupVersion.WithKind("TokenRequest").GroupKind(), "", field.ErrorList{e})
}

// boundObject checks the object a token of service account sa in
// namespace ns is bound to.
func (c *Cluster) boundObject(ns, sa string, ref *authenticationv1.BoundObjectReference) error {
	var gvr schema.GroupVersionResource
	objNS := ns
	switch ref.Kind {
	case "Pod":
		gvr = podsGVR
	case "Secret":
		gvr = corev1.SchemeGroupVersion.WithResource("secrets")
	case "Node":
		gvr, objNS = corev1.SchemeGroupVersion.WithResource("nodes"), ""
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token to object of type %s", ref.Kind))
	}
	obj, err := c.tracker().Get(gvr, objNS, ref.Name)
	if err != nil {
		return apierrors.NewNotFound(gvr.GroupResource(), ref.Name)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	if ref.UID != "" && ref.UID != m.GetUID() {
		return apierrors.NewConflict(gvr.GroupResource(), ref.Name,
			fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record (%s); the object might have been deleted and then recreated", ref.UID, m.GetUID()))
	}
	if p, ok := obj.(*corev1.Pod); ok {
		if runs := cmp.Or(p.Spec.ServiceAccountName, "default"); runs != sa {
			return apierrors.NewBadRequest(fmt.Sprintf("cannot bind token for serviceaccount %q to pod running with different serviceaccount name.", sa))
		}
	}
	return nil
}
