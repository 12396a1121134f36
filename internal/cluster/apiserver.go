package cluster

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"
)

var (
	namespacesGVR = corev1.SchemeGroupVersion.WithResource("namespaces")
	podsGVR       = corev1.SchemeGroupVersion.WithResource("pods")
)

// installAPI adds the API server behaviour the fake clientset lacks. The
// reactors run under the fake's lock, so they use the tracker directly and
// never call back into the clientset.
func (c *Cluster) installAPI() {
	c.fake.PrependReactor("create", "*", c.admitCreate)
	c.fake.PrependReactor("update", "*", c.admitUpdate)
	c.fake.PrependReactor("patch", "*", c.admitPatch)
	c.fake.PrependReactor("delete", "pods", c.deletePod)
	c.fake.PrependReactor("delete", "services", c.deleteService)
	c.fake.PrependReactor("create", "serviceaccounts", c.createToken)
}

func (c *Cluster) tracker() k8stesting.ObjectTracker { return c.fake.Tracker() }

// admitCreate names, defaults, validates and stores a new object, as the API
// server's create path does (generateName, uid, creationTimestamp,
// namespace lifecycle, ClusterIP allocation).
func (c *Cluster) admitCreate(action k8stesting.Action) (bool, runtime.Object, error) {
	ca := action.(k8stesting.CreateAction)
	if action.GetSubresource() != "" {
		return false, nil, nil
	}
	gvr, ns := action.GetResource(), action.GetNamespace()
	obj := ca.GetObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return true, nil, err
	}
	if ns != "" {
		if _, err := c.tracker().Get(namespacesGVR, "", ns); err != nil {
			return true, nil, apierrors.NewNotFound(namespacesGVR.GroupResource(), ns)
		}
	}
	if err := c.assignName(gvr, ns, m); err != nil {
		return true, nil, err
	}
	m.SetUID(uuid.NewUUID())
	m.SetCreationTimestamp(metav1.Now())
	m.SetGeneration(1)
	m.SetDeletionTimestamp(nil)
	release, err := c.admit(obj)
	if err != nil {
		return true, nil, err
	}
	if err := c.tracker().Create(gvr, obj, ns); err != nil {
		release()
		return true, nil, err
	}
	stored, err := c.tracker().Get(gvr, ns, m.GetName())
	return true, stored, err
}

func (c *Cluster) assignName(gvr schema.GroupVersionResource, ns string, m metav1.Object) error {
	if m.GetName() != "" {
		return nil
	}
	if m.GetGenerateName() == "" {
		return apierrors.NewBadRequest(fmt.Sprintf("%s: metadata.name or metadata.generateName is required", gvr.Resource))
	}
	for range 10 {
		name := m.GetGenerateName() + c.randString(gvr.Resource, 5)
		if _, err := c.tracker().Get(gvr, ns, name); apierrors.IsNotFound(err) {
			m.SetName(name)
			return nil
		}
	}
	return apierrors.NewAlreadyExists(gvr.GroupResource(), m.GetGenerateName())
}

// admit defaults and validates obj by type and returns a function that undoes
// any allocation it made, for when storing fails.
func (c *Cluster) admit(obj runtime.Object) (release func(), err error) {
	release = func() {}
	if err := defaultAndValidate(obj); err != nil {
		return release, err
	}
	switch o := obj.(type) {
	case *corev1.Service:
		ip, err := c.allocateClusterIP(o)
		if err != nil {
			return release, err
		}
		if ip.IsValid() {
			release = func() { c.serviceIP.Release(ip) }
		}
	case *appsv1.ReplicaSet:
		DefaultPodSpec(&o.Spec.Template.Spec)
	case *corev1.Pod:
		DefaultPodSpec(&o.Spec)
		o.Status = corev1.PodStatus{Phase: corev1.PodPending}
	}
	return release, nil
}

func (c *Cluster) allocateClusterIP(s *corev1.Service) (netip.Addr, error) {
	path := field.NewPath("spec", "clusterIP")
	switch {
	case s.Spec.Type == corev1.ServiceTypeExternalName:
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
		return netip.Addr{}, nil
	case s.Spec.ClusterIP == corev1.ClusterIPNone:
		s.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
		return netip.Addr{}, nil
	case s.Spec.ClusterIP == "":
		ip, err := c.randomServiceIP()
		if err != nil {
			return ip, invalid("Service", s.Name, field.InternalError(path, fmt.Errorf("no free ClusterIP in %v", c.cfg.ServiceCIDR)))
		}
		s.Spec.ClusterIP = ip.String()
		setClusterIPs(&s.Spec, ip)
		return ip, nil
	}
	ip, err := netip.ParseAddr(s.Spec.ClusterIP)
	if err != nil {
		return ip, invalid("Service", s.Name, field.Invalid(path, s.Spec.ClusterIP, `must be an IP address or "None"`))
	}
	if err := c.serviceIP.Reserve(ip); err != nil {
		return netip.Addr{}, invalid("Service", s.Name, field.Invalid(path, s.Spec.ClusterIP,
			fmt.Sprintf("must be a free address in the service range %v (%v)", c.cfg.ServiceCIDR, err)))
	}
	setClusterIPs(&s.Spec, ip)
	return ip, nil
}

// setClusterIPs stores the primary (IPv4) ClusterIP in clusterIPs[0],
// keeping an IPv6 secondary as written (validation checked it: the lab
// allocates none and reserves none), and sets ipFamilies and
// ipFamilyPolicy to match, as the API server stores them.
func setClusterIPs(spec *corev1.ServiceSpec, primary netip.Addr) {
	ips := []string{primary.String()}
	families := []corev1.IPFamily{corev1.IPv4Protocol}
	if len(spec.ClusterIPs) == 2 {
		ips = append(ips, netip.MustParseAddr(spec.ClusterIPs[1]).String())
		families = append(families, corev1.IPv6Protocol)
	}
	spec.ClusterIPs, spec.IPFamilies = ips, families
	if spec.IPFamilyPolicy == nil {
		p := corev1.IPFamilyPolicySingleStack
		spec.IPFamilyPolicy = &p
	}
}

// admitUpdate stores an update the way the API server's status subresource
// split works: a status update changes only status; any other update keeps
// the stored status, uid, creationTimestamp and deletionTimestamp, keeps
// immutable Service fields, defaults and validates, and bumps
// metadata.generation when the defaulted spec differs from the stored one.
func (c *Cluster) admitUpdate(action k8stesting.Action) (bool, runtime.Object, error) {
	ua := action.(k8stesting.UpdateAction)
	obj, err := c.storeUpdate(action.GetResource(), action.GetNamespace(), action.GetSubresource(), ua.GetObject())
	return true, obj, err
}

// admitPatch applies a JSON, merge or strategic-merge patch to the stored
// object and stores the result through the update path, so a patch defaults,
// validates and bumps metadata.generation as an update does (kubectl patch,
// kubectl rollout restart). Server-side apply patches are left to the fake's
// own handling (a strategic merge, without field ownership).
func (c *Cluster) admitPatch(action k8stesting.Action) (bool, runtime.Object, error) {
	pa, ok := action.(k8stesting.PatchActionImpl)
	if !ok || pa.GetPatchType() == types.ApplyPatchType {
		return false, nil, nil
	}
	gvr, ns := action.GetResource(), action.GetNamespace()
	stored, err := c.tracker().Get(gvr, ns, pa.GetName())
	if err != nil {
		return true, nil, err
	}
	patched, err := applyPatch(stored, pa.GetPatchType(), pa.GetPatch())
	if err != nil {
		return true, nil, apierrors.NewBadRequest(fmt.Sprintf("%s %q: %v", gvr.Resource, pa.GetName(), err))
	}
	obj, err := c.storeUpdate(gvr, ns, action.GetSubresource(), patched)
	return true, obj, err
}

// applyPatch returns a copy of stored with patch applied.
func applyPatch(stored runtime.Object, pt types.PatchType, patch []byte) (runtime.Object, error) {
	old, err := json.Marshal(stored)
	if err != nil {
		return nil, err
	}
	var modified []byte
	switch pt {
	case types.JSONPatchType:
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, err
		}
		modified, err = p.Apply(old)
		if err != nil {
			return nil, err
		}
	case types.MergePatchType:
		modified, err = jsonpatch.MergePatch(old, patch)
	case types.StrategicMergePatchType:
		modified, err = strategicpatch.StrategicMergePatch(old, patch, stored)
	default:
		return nil, fmt.Errorf("unsupported patch type %q", pt)
	}
	if err != nil {
		return nil, err
	}
	out := reflect.New(reflect.TypeOf(stored).Elem()).Interface().(runtime.Object)
	if err := json.Unmarshal(modified, out); err != nil {
		return nil, err
	}
	return out, nil
}

// storeUpdate is the update path shared by update and patch.
func (c *Cluster) storeUpdate(gvr schema.GroupVersionResource, ns, subresource string, obj runtime.Object) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	storedObj, err := c.tracker().Get(gvr, ns, m.GetName())
	if err != nil {
		return nil, err
	}
	var next runtime.Object
	switch subresource {
	case "status":
		next = storedObj.DeepCopyObject()
		if err := copyField(next, obj, "status"); err != nil {
			return nil, err
		}
	case "":
		if next, err = c.nextSpec(storedObj, obj); err != nil {
			return nil, err
		}
	default:
		return nil, apierrors.NewMethodNotSupported(gvr.GroupResource(), "update/"+subresource)
	}
	if err := c.tracker().Update(gvr, next, ns); err != nil {
		return nil, err
	}
	return c.tracker().Get(gvr, ns, m.GetName())
}

// nextSpec returns the object a non-status update stores: obj with the stored
// status and server-owned metadata, defaulted and validated, its generation
// bumped when the spec changed.
func (c *Cluster) nextSpec(storedObj, obj runtime.Object) (runtime.Object, error) {
	sm, _ := meta.Accessor(storedObj)
	next := obj.DeepCopyObject()
	if err := copyField(next, storedObj, "status"); err != nil {
		return nil, err
	}
	nm, _ := meta.Accessor(next)
	nm.SetUID(sm.GetUID())
	nm.SetCreationTimestamp(sm.GetCreationTimestamp())
	nm.SetDeletionTimestamp(sm.GetDeletionTimestamp())
	nm.SetDeletionGracePeriodSeconds(sm.GetDeletionGracePeriodSeconds())
	nm.SetGeneration(sm.GetGeneration())
	if err := c.admitSpecUpdate(storedObj, next); err != nil {
		return nil, err
	}
	changed, err := specChanged(storedObj, next)
	if err != nil {
		return nil, err
	}
	if changed {
		nm.SetGeneration(sm.GetGeneration() + 1)
	}
	return next, nil
}

func (c *Cluster) admitSpecUpdate(old, next runtime.Object) error {
	switch n := next.(type) {
	case *corev1.Service:
		o := old.(*corev1.Service)
		if n.Spec.ClusterIP == "" && len(n.Spec.ClusterIPs) == 0 {
			n.Spec.ClusterIP = o.Spec.ClusterIP
		}
		if n.Spec.ClusterIP == o.Spec.ClusterIP && len(n.Spec.ClusterIPs) == 0 {
			n.Spec.ClusterIPs, n.Spec.IPFamilies, n.Spec.IPFamilyPolicy = o.Spec.ClusterIPs, o.Spec.IPFamilies, o.Spec.IPFamilyPolicy
		}
		DefaultService(n)
		if n.Spec.ClusterIP != o.Spec.ClusterIP {
			return invalid("Service", n.Name, field.Invalid(field.NewPath("spec", "clusterIP"), n.Spec.ClusterIP, "field is immutable"))
		}
		return ValidateService(n)
	}
	return defaultAndValidate(next)
}

// copyField sets dst's top-level field (e.g. "status") to src's and passes
// dst through the unstructured form, as every update has always been stored
// (timestamps keep whole seconds, as the API server serializes them). One
// round trip of dst gives what converting both objects and swapping the
// field's map did, because the conversion goes field by field.
func copyField(dst, src runtime.Object, field string) error {
	if f := structField(dst, field); f.IsValid() {
		f.Set(structField(src, field))
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dst)
	if err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u, dst)
}

// specChanged compares the unstructured forms of a's and b's spec (none
// for types without one, such as EndpointSlice), converting only the spec.
func specChanged(a, b runtime.Object) (bool, error) {
	as, bs := structField(a, "spec"), structField(b, "spec")
	if !as.IsValid() || !bs.IsValid() {
		return as.IsValid() != bs.IsValid(), nil
	}
	au, err := runtime.DefaultUnstructuredConverter.ToUnstructured(as.Addr().Interface())
	if err != nil {
		return false, err
	}
	bu, err := runtime.DefaultUnstructuredConverter.ToUnstructured(bs.Addr().Interface())
	if err != nil {
		return false, err
	}
	return !equality.Semantic.DeepEqual(au, bu), nil
}

// structField returns the field of obj (a pointer to an API struct) whose
// JSON name is name, or the zero Value when it has none.
func structField(obj runtime.Object, name string) reflect.Value {
	v := reflect.ValueOf(obj).Elem()
	for i := range v.NumField() {
		tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		if tag == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}

// deletePod emulates graceful deletion: the first delete with a grace period
// sets deletionTimestamp = now + grace and deletionGracePeriodSeconds, and the
// kubelet later removes the object with a zero grace period. Grace comes from
// DeleteOptions or else spec.terminationGracePeriodSeconds (default 30).
func (c *Cluster) deletePod(action k8stesting.Action) (bool, runtime.Object, error) {
	da := action.(k8stesting.DeleteActionImpl)
	obj, err := c.tracker().Get(podsGVR, da.Namespace, da.Name)
	if err != nil {
		return true, nil, err
	}
	pod := obj.(*corev1.Pod).DeepCopy()
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		grace = *pod.Spec.TerminationGracePeriodSeconds
	}
	if da.DeleteOptions.GracePeriodSeconds != nil {
		grace = *da.DeleteOptions.GracePeriodSeconds
	}
	if grace <= 0 {
		return false, nil, nil // remove now
	}
	if pod.DeletionTimestamp != nil {
		if cur := pod.DeletionGracePeriodSeconds; cur != nil && *cur <= grace {
			return true, nil, nil // already terminating at least as fast
		}
	}
	ts := metav1.NewTime(time.Now().Add(time.Duration(grace) * time.Second))
	pod.DeletionTimestamp = &ts
	pod.DeletionGracePeriodSeconds = &grace
	return true, nil, c.tracker().Update(podsGVR, pod, da.Namespace)
}

// deleteService frees the Service's ClusterIP, then lets the delete proceed.
func (c *Cluster) deleteService(action k8stesting.Action) (bool, runtime.Object, error) {
	da := action.(k8stesting.DeleteActionImpl)
	obj, err := c.tracker().Get(corev1.SchemeGroupVersion.WithResource("services"), da.Namespace, da.Name)
	if err != nil {
		return true, nil, err
	}
	svc := obj.(*corev1.Service)
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil {
		c.serviceIP.Release(ip)
	}
	return false, nil, nil
}

// Key returns the informer cache key of obj ("namespace/name").
func Key(obj metav1.Object) string {
	return types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}.String()
}
