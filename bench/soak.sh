#!/usr/bin/env bash
# Soak: runs a scenario at 1000 calls/s (10 round_robin clients on 5 pods,
# MaxConnectionAge 5s so connections churn too) for SOAK_SECONDS (default
# 600), samples the process's RSS every 10 s, and says whether it stayed
# flat: after the first minute, within 10% of its level then. Outside the
# default test run (it takes the whole duration).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${SOAK_SECONDS:-600}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/pinlab" ./cmd/pinlab
cat > "$dir/soak.yaml" <<YAML
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: pricing, namespace: shop}
spec:
  replicas: 5
  selector: {matchLabels: {app: pricing}}
  template:
    metadata: {labels: {app: pricing}}
    spec:
      containers:
      - {name: pricing, image: pinlab, args: [pod, pricing, --max-connection-age=5s, --max-connection-age-grace=2s], ports: [{name: grpc, containerPort: 8471}]}
---
apiVersion: v1
kind: Service
metadata: {name: pricing-headless, namespace: shop}
spec:
  clusterIP: None
  selector: {app: pricing}
  ports: [{name: grpc, port: 8471, targetPort: grpc}]
---
apiVersion: pinlab.dev/v1alpha1
kind: Scenario
metadata: {name: soak}
spec:
  duration: ${secs}s
  clients:
  - {name: order, namespace: shop, count: 10, target: "dns:///pricing-headless.shop.svc.cluster.local:8471", policy: round_robin, rate: 100}
YAML
"$dir/pinlab" lab run "$dir/soak.yaml" --progress off -o json > "$dir/result.json" &
pid=$!
samples=()
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$rss" ] && samples+=("$rss") && echo "$(( ${#samples[@]} * 10 - 10 ))s rss ${rss} KiB"
  sleep 10
done
wait "$pid" || true
n=${#samples[@]}
if [ "$n" -lt 8 ]; then echo "too few samples ($n)"; exit 1; fi
base=${samples[6]} # after the first minute
last=${samples[$((n-1))]}
peak=$base
for s in "${samples[@]:6}"; do [ "$s" -gt "$peak" ] && peak=$s; done
echo "RSS at 60s ${base} KiB, peak after ${peak} KiB, last ${last} KiB"
if [ $((peak * 10)) -le $((base * 11)) ]; then echo "flat: within 10%"; else echo "NOT flat: grew more than 10%"; exit 1; fi
