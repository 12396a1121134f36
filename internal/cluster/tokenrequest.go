package cluster

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
// kube-apiserver's token storage does: the service account must exist; a
// bound Pod must exist and have the UID the reference names (a pod
// deleted and made again is another); the length defaults to an hour and
// may not be under ten minutes. The token is random and opaque: the
// embedded API server authenticates no requests, so nothing checks it.
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
	if secs < minTokenSeconds {
		return true, nil, apierrors.NewBadRequest("spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes")
	}
	if ref := out.Spec.BoundObjectRef; ref != nil && ref.Kind == "Pod" {
		obj, err := c.tracker().Get(podsGVR, ns, ref.Name)
		if err != nil {
			return true, nil, apierrors.NewNotFound(podsGVR.GroupResource(), ref.Name)
		}
		if uid := obj.(*corev1.Pod).UID; ref.UID != "" && ref.UID != uid {
			return true, nil, apierrors.NewConflict(podsGVR.GroupResource(), ref.Name,
				fmt.Errorf("the UID in the bound object reference (%s) does not match the UID in record (%s); the object might have been deleted and then recreated", ref.UID, uid))
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
