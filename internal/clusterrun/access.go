package clusterrun

import (
	"context"
	"fmt"
	"strings"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
	"k8s.io/client-go/kubernetes"
)

// Permissions are what `cluster run` does on the cluster, as RBAC rules
// name them; deploy/rbac/cluster-run.yaml grants exactly these. The
// namespaced ones are asked for in the run's first namespace, which does
// not exist yet: a ClusterRole bound by a ClusterRoleBinding grants them,
// as the run creates its namespaces.
var Permissions = []evidence.Permission{
	{Verb: "create", Resource: "namespaces", For: "create each variant's namespace"},
	{Verb: "delete", Resource: "namespaces", For: "delete them when the run ends"},
	{Verb: "get", Resource: "namespaces", For: "wait until they are gone"},
	{Verb: "list", Resource: "namespaces", For: "find what a killed run left (cluster clean)"},
	{Verb: "create", Resource: "secrets", For: "hold the run's token for its pods"},
	{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", For: "mark each namespace in use by the run"},
	{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", For: "renew that lease"},
	{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", For: "renew that lease"},
	{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", For: "leave the namespaces of runs in progress (cluster clean)"},
	{Verb: "watch", Group: "coordination.k8s.io", Resource: "leases", For: "see whether a lease that looks lapsed is still renewed (cluster clean)"},
	{Verb: "create", Group: "apps", Resource: "deployments", For: "apply the scenario's Deployments"},
	{Verb: "get", Group: "apps", Resource: "deployments", For: "read one before scaling or changing it"},
	{Verb: "update", Group: "apps", Resource: "deployments", For: "scale and roll them out"},
	{Verb: "patch", Group: "apps", Resource: "deployments", For: "rollout restart"},
	{Verb: "list", Group: "apps", Resource: "deployments", For: "wait for their rollouts"},
	{Verb: "watch", Group: "apps", Resource: "deployments", For: "wait for their rollouts"},
	{Verb: "create", Group: "apps", Resource: "statefulsets", For: "run the load clients"},
	{Verb: "get", Group: "apps", Resource: "statefulsets", For: "read one before scaling or changing it"},
	{Verb: "update", Group: "apps", Resource: "statefulsets", For: "change the clients' settings"},
	{Verb: "patch", Group: "apps", Resource: "statefulsets", For: "rollout restart"},
	{Verb: "list", Group: "apps", Resource: "statefulsets", For: "wait for the clients"},
	{Verb: "watch", Group: "apps", Resource: "statefulsets", For: "wait for the clients"},
	{Verb: "create", Resource: "services", For: "apply the scenario's Services"},
	{Verb: "list", Resource: "services", For: "follow them"},
	{Verb: "watch", Resource: "services", For: "follow them"},
	{Verb: "list", Resource: "pods", For: "follow the pods"},
	{Verb: "watch", Resource: "pods", For: "follow the pods"},
	{Verb: "delete", Resource: "pods", For: "delete pods and restart clients"},
	{Verb: "create", Resource: "pods", Subresource: "portforward", For: "read the clients' calls and reach the pods' admin endpoints"},
	{Verb: "get", Resource: "pods", Subresource: "portforward", For: "port-forward over WebSocket, which client-go tries first"},
	{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices", For: "wait until Services list their ready pods"},
	{Verb: "watch", Group: "discovery.k8s.io", Resource: "endpointslices", For: "wait until Services list their ready pods"},
}

// cleanPermissions are the Permissions cluster clean uses.
func cleanPermissions() []evidence.Permission {
	var out []evidence.Permission
	for _, p := range Permissions {
		if p.Resource == "namespaces" && p.Verb != "create" || p.Resource == "leases" && (p.Verb == "list" || p.Verb == "watch") {
			out = append(out, p)
		}
	}
	return out
}

// checkAccess reports every permission of perms the user lacks, by name,
// before anything is created or deleted; what names the command.
func checkAccess(ctx context.Context, cs kubernetes.Interface, host, namespace, what string, perms []evidence.Permission) error {
	denied, err := evidence.CheckAccess(ctx, cs, namespace, perms)
	if err != nil {
		return fmt.Errorf("the API server at %s: checking permissions: %w", host, err)
	}
	if len(denied) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the API server at %s denies %d of the permissions %s needs (nothing was changed; deploy/rbac/cluster-run.yaml grants them):", host, len(denied), what)
	for _, p := range denied {
		res := p.Resource
		if p.Subresource != "" {
			res += "/" + p.Subresource
		}
		if p.Group != "" {
			res += "." + p.Group
		}
		fmt.Fprintf(&b, "\n  %s %s: to %s", p.Verb, res, p.For)
	}
	return exit.UsageError(fmt.Errorf("%s", b.String()))
}
