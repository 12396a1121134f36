package diagnose

// The fixes, each with what it costs and the lab command that shows it.
var (
	fixHeadlessRR = Fix{
		Name:     "headless Service + round_robin + re-resolution",
		How:      "clients dial dns:///<svc>-headless.<ns>.svc.cluster.local:<port> with loadBalancingConfig [{round_robin:{}}], and the servers set MaxConnectionAge so that clients reconnect and re-resolve",
		TradeOff: "every client must be configured, in every language; new pods are seen only at the next resolution (grpc-go: on a reconnect or GOAWAY, at most once per 30 s), later still behind runtime DNS caches (the JVM's)",
		Scenario: "pinlab lab run scale-out --variant headless-rr-age",
	}
	fixRoundRobin = Fix{
		Name:     "round_robin in the clients",
		How:      "set the service config's loadBalancingConfig to [{round_robin:{}}]: one connection per resolved pod, each call to the next",
		TradeOff: "a connection per pod per client; pods added later stay idle until the next resolution (add MaxConnectionAge)",
		Scenario: "pinlab lab run scale-out --variant headless-rr",
	}
	fixAgeClusterIP = Fix{
		Name:     "server MaxConnectionAge",
		How:      "grpc-go keepalive.ServerParameters{MaxConnectionAge: 30s-5m, MaxConnectionAgeGrace: a few seconds} (or the equivalent in grpc-java and C-core): the server sends GOAWAY, the client reconnects and kube-proxy picks again",
		TradeOff: "no client change, but rebalancing is gradual (each reconnect is a new random pick, so some skew remains) and every reconnect costs a handshake",
		Scenario: "pinlab lab run scale-out --variant clusterip-age",
	}
	fixAgeResolve = Fix{
		Name:     "server MaxConnectionAge",
		How:      "a MaxConnectionAge on the servers: each GOAWAY makes the client re-resolve, and round_robin then connects to the new pods",
		TradeOff: "new pods wait about the connection age plus grpc-go's 30 s floor between resolutions; every reconnect costs a handshake",
		Scenario: "pinlab lab run connection-age",
	}
	fixWatchResolver = Fix{
		Name:     "a watch-based resolver",
		How:      "a resolver that watches EndpointSlices (or xDS from a control plane) pushes pod changes to the clients at once",
		TradeOff: "a resolver per client language and API (or control-plane) access from every client",
		Scenario: "pinlab lab run rollout --variant fast-resolver",
	}
	fixProxy = Fix{
		Name:     "an L7 proxy (mesh sidecar or gateway)",
		How:      "an HTTP/2-aware proxy (Envoy, Linkerd, an Istio sidecar or a gateway) keeps the client's connection and picks a pod per call",
		TradeOff: "no client change, but another hop on every call (latency, CPU) and another component to run and configure",
		Scenario: "pinlab lab run l7-proxy",
	}

	fixMeshBypassed = Fix{
		Name:     "route the calls through the clients' sidecar",
		How:      "the clients have a mesh sidecar, but their calls reach one pod over their own connection: make the sidecar carry them (do not skip the port in the injector's outbound exclusions; dial the Service's ClusterIP name, which the mesh balances per call, not pod IPs)",
		TradeOff: "the mesh's hop and its configuration on every call; the sidecar's own policy decides the spread",
		Scenario: "pinlab lab run l7-proxy",
	}

	fixHealthCheck = Fix{
		Name:     "client-side health checking",
		How:      "round_robin with the service config's healthCheckConfig {serviceName: \"\"} and the servers' grpc.health.v1 reporting NOT_SERVING when not ready: the channel stops calling that pod at once",
		TradeOff: "every client must be configured (grpc-go acts on it under round_robin only) and every server must report its own readiness over gRPC health",
		Scenario: "pinlab lab run health-check --variant health-check",
	}

	clusterIPFixes         = []Fix{fixHeadlessRR, fixAgeClusterIP, fixProxy}
	headlessPickFirstFixes = []Fix{fixRoundRobin, fixHeadlessRR, fixProxy}
	staleFixes             = []Fix{fixAgeResolve, fixWatchResolver, fixProxy}
	staleAddressFixes      = []Fix{fixHealthCheck, fixAgeClusterIP, fixWatchResolver}
)
