package kubelet

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Node heartbeat timings, as the kubelet's defaults with leases: the Lease
// lasts 40 s and is renewed every quarter of that; the Node's status is
// written every minute (the kubelet writes it every 5 min or on change;
// node-lifecycle-controller reads health from the Lease).
const (
	leaseDuration   = 40 * time.Second
	leaseRenew      = leaseDuration / 4
	nodeStatusEvery = time.Minute
)

// DefaultMaxPods is the pod capacity a registered Node reports: room for
// the lab's largest scenario (plan.MaxPods) and its rollouts' surge.
const DefaultMaxPods = 1100

// registerNode creates the Node this kubelet runs as (or takes the one that
// exists), reports it Ready with its capacity, and creates its Lease in
// kube-node-lease, as the kubelet registers itself with an API server.
func (k *Kubelet) registerNode(ctx context.Context) error {
	name := k.cfg.NodeName
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		corev1.LabelHostname: name, corev1.LabelOSStable: goruntime.GOOS, corev1.LabelArchStable: goruntime.GOARCH,
	}}}
	_, err := k.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubelet: register Node %s: %w", name, err)
	}
	if err := k.writeNodeStatus(ctx); err != nil {
		return err
	}
	return k.renewLease(ctx)
}

// writeNodeStatus reports the Node Ready with its address and capacity; the
// scheduler binds no pod to a node without allocatable pods. A write that
// meets a newer Node (node-lifecycle-controller writes it too) is made
// again on that one.
func (k *Kubelet) writeNodeStatus(ctx context.Context) error {
	nodes := k.client.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		k.nodeStatus(n)
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("kubelet: Node %s status: %w", k.cfg.NodeName, err)
	}
	return nil
}

// nodeStatus sets n's status as this kubelet reports it.
func (k *Kubelet) nodeStatus(n *corev1.Node) {
	now := metav1.Now()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "pinlab kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready.LastTransitionTime = c.LastTransitionTime
		}
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(goruntime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods:   resource.MustParse(strconv.Itoa(k.cfg.MaxPods)),
	}
	n.Status.Capacity, n.Status.Allocatable = capacity, capacity
	n.Status.Conditions = []corev1.NodeCondition{ready}
	n.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: k.cfg.NodeIP.String()},
		{Type: corev1.NodeHostName, Address: k.cfg.NodeName},
	}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = k.cfg.APIPort
	n.Status.NodeInfo.KubeletVersion = "pinlab"
	n.Status.NodeInfo.OperatingSystem, n.Status.NodeInfo.Architecture = goruntime.GOOS, goruntime.GOARCH
}

// renewLease creates or renews the Node's Lease in kube-node-lease.
func (k *Kubelet) renewLease(ctx context.Context) error {
	leases := k.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, k.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: k.cfg.NodeName, Namespace: corev1.NamespaceNodeLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.cfg.NodeName),
				LeaseDurationSeconds: ptr.To(int32(leaseDuration.Seconds())), RenewTime: &now},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else if err == nil {
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{}) // a conflict is retried at the next renewal
	}
	if err != nil {
		return fmt.Errorf("kubelet: Node %s Lease: %w", k.cfg.NodeName, err)
	}
	return nil
}

// heartbeat renews the Lease every leaseRenew and rewrites the Node's
// status every nodeStatusEvery until ctx ends; failures are logged and
// retried at the next tick (node-lifecycle-controller marks the Node
// unknown if they last 40 s).
func (k *Kubelet) heartbeat(ctx context.Context) {
	lease, status := time.NewTicker(leaseRenew), time.NewTicker(nodeStatusEvery)
	defer lease.Stop()
	defer status.Stop()
	for {
		var err error
		select {
		case <-ctx.Done():
			return
		case <-lease.C:
			err = k.renewLease(ctx)
		case <-status.C:
			err = k.writeNodeStatus(ctx)
		}
		if err != nil && ctx.Err() == nil {
			k.cfg.Logger.Warn("kubelet: node heartbeat", "err", err)
		}
	}
}
