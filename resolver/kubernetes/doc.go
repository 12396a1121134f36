// Package kubernetes is a grpc-go name resolver for kubernetes:// targets:
// it watches a Service's EndpointSlices through the Kubernetes API and
// gives the channel the Service's ready endpoints within milliseconds of a
// change, so a round_robin channel spreads over pods added by a scale-out
// and drops pods as they terminate, with none of grpc-go's DNS resolver's
// waits (it re-resolves only after a connection breaks, at most once per
// 30 s).
//
// Importing the package registers a Builder with default options for the
// "kubernetes" scheme; Register replaces it with a configured one, and
// NewBuilder makes one for a single channel (grpc.WithResolvers):
//
//	conn, err := grpc.NewClient("kubernetes:///pricing.shop:grpc",
//		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// # Targets
//
// The forms of github.com/sercand/kuberesolver:
//
//	kubernetes:///service[.namespace[.svc.<zone>]][:port]
//	kubernetes://namespace/service[:port]
//	kubernetes://service[.namespace[.svc.<zone>]][:port]
//
// The port is a Service port's name, looked up in each EndpointSlice (the
// pods' port it maps to), or a number, dialled as is on every endpoint.
// Without a port each slice's first port is used. Without a namespace the
// target is in the pod's own namespace (from its service account volume),
// the kubeconfig context's namespace out of a cluster, else "default".
//
// # What is published
//
// All the EndpointSlices labelled kubernetes.io/service-name=<service> in
// the namespace are merged, each address once (a ready copy wins). An
// endpoint is published when its ready condition is true or unset; with
// WithTerminatingFallback, when none is, the serving and terminating ones
// are, as kube-proxy does. Each resolver.Endpoint and resolver.Address
// carries an EndpointInfo (zone, node, hostname, topology hints,
// conditions).
//
// # Errors
//
// The resolver never hangs silently and never keeps addresses without
// saying so. Each of these goes to the channel through
// resolver.ClientConn.ReportError, with a message saying which, and is
// counted:
//
//   - no ready endpoint (the slices and their states are counted in the
//     message), no slice with the target's port name, no EndpointSlice,
//     or no such Service: the channel gets an empty address list first, so
//     calls fail with the message instead of going to stale pods;
//   - a failed list or watch, 401 and 403 (RBAC) included: the channel
//     keeps the addresses it has, which may well still work, and the
//     message says how old they are. client-go retries with back-off; the
//     first success re-publishes and ends the error.
//
// # Metrics
//
// With WithRegisterer, per target (kubernetes://namespace/service:port):
// grpc_kubernetes_resolver_endpoints (addresses last published),
// grpc_kubernetes_resolver_updates_total, grpc_kubernetes_resolver_errors_total
// (label reason: no_endpoints, no_slices, service_not_found,
// port_not_found, forbidden, api) and
// grpc_kubernetes_resolver_seconds_since_update.
//
// # RBAC
//
// get, list and watch on endpointslices (API group discovery.k8s.io) in
// the target's namespace; get on services there lets the resolver tell a
// missing Service from one without endpoints (without it, the message says
// it could not tell).
//
// # Binary size
//
// The package builds the discovery/v1 and core/v1 typed clients, not a
// clientset (k8s.io/client-go/kubernetes), so a binary does not link the
// other API groups' clients; WithClient still takes a clientset. The typed
// clients' codecs (k8s.io/client-go/kubernetes/scheme) still register
// every group's types. examples/kubernetes-resolver (linux/amd64, Go
// 1.26.8, client-go v0.37.2, grpc-go v1.85.0) builds to 57.3 MB, 40.3 MB
// with -ldflags='-s -w' (70.2 and 49.4 MB on a clientset); the same client
// on grpc-go's own resolvers is 15.4 MB (10.6 MB). grpc-go links
// golang.org/x/net/trace, whose html/template makes the linker keep every
// exported method of every linked type: built with -tags grpcnotrace
// (grpc.EnableTracing then does nothing) the example is 41.8 MB (29.6 MB).
package kubernetes
