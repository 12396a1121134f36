package controlplane

import (
	"strconv"
	"strings"

	"github.com/pinlab/pinlab/internal/pki"
)

// serviceAccountIssuer is the API server's --service-account-issuer.
const serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// Node monitoring by node-lifecycle-controller: it looks at nodes every
// second (so a new node's not-ready taint goes as soon as the node reports
// Ready), and marks a node whose Lease and status went stale for 40 s
// unknown (the kubelet's default; a node agent renews its Lease every 10 s).
const (
	nodeMonitorPeriod      = "1s"
	nodeMonitorGracePeriod = "40s"
)

// etcdArgs returns etcd's flags: one member on 127.0.0.1, no fsync (the
// data is thrown away with the lab).
func (cp *ControlPlane) etcdArgs() []string {
	client := "http://127.0.0.1:" + strconv.Itoa(cp.cfg.Ports.EtcdClient)
	peer := "http://127.0.0.1:" + strconv.Itoa(cp.cfg.Ports.EtcdPeer)
	return []string{
		"--name=pinlab",
		"--data-dir=" + cp.path("etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=pinlab=" + peer,
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
}

// apiserverArgs returns kube-apiserver's flags.
func (cp *ControlPlane) apiserverArgs() []string {
	return []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(cp.cfg.Ports.EtcdClient),
		// Every address of the namespace: 127.0.0.1 (pinlab, and kubectl
		// through the forwarder) and the node's, as a real cluster's API
		// server has one (a namespace joined to the lab's reaches it
		// there). The namespace is private: nothing off the machine can.
		"--bind-address=0.0.0.0",
		"--secure-port=" + strconv.Itoa(cp.cfg.Ports.APIServer),
		"--advertise-address=" + cp.cfg.AdvertiseAddress.String(),
		// The reconciler would publish the advertise address as the
		// kubernetes Service's endpoint; nothing listens there.
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=" + cp.cfg.ServiceCIDR.String(),
		"--token-auth-file=" + cp.path("tokens.csv"),
		"--authorization-mode=RBAC",
		"--disable-admission-plugins=ServiceAccount",
		"--cert-dir=" + cp.path("certs"),
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + cp.path("sa.pub"),
		"--service-account-signing-key-file=" + cp.path("sa.key"),
		"--profiling=false",
		// The kubelet API (logs, port-forward): reached at the Node's
		// InternalIP (its host name resolves nowhere), its serving
		// certificate verified with the cluster CA, with a client
		// certificate of that CA.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-certificate-authority=" + cp.path(pki.CACertFile),
		"--kubelet-client-certificate=" + cp.path("kubelet-client.crt"),
		"--kubelet-client-key=" + cp.path("kubelet-client.key"),
	}
}

// componentArgs returns the controller-manager's or the scheduler's
// flags: its kubeconfig (for delegated authentication too), /healthz on
// 127.0.0.1, no leader election.
func (cp *ControlPlane) componentArgs(name string) []string {
	kubeconfig := cp.path(name + ".kubeconfig")
	port := cp.cfg.Ports.Scheduler
	if name == kcmName {
		port = cp.cfg.Ports.ControllerManager
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--leader-elect=false",
		"--profiling=false",
	}
	if name == kcmName {
		args = append(args,
			"--controllers="+strings.Join(cp.cfg.Controllers, ","),
			"--use-service-account-credentials=false",
			"--node-monitor-period="+nodeMonitorPeriod,
			"--node-monitor-grace-period="+nodeMonitorGracePeriod,
		)
	}
	return args
}

// componentURL returns the base URL the controller-manager or the
// scheduler serves /healthz on.
func (cp *ControlPlane) componentURL(name string) string {
	port := cp.cfg.Ports.Scheduler
	if name == kcmName {
		port = cp.cfg.Ports.ControllerManager
	}
	return "https://127.0.0.1:" + strconv.Itoa(port)
}
