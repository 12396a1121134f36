#!/usr/bin/env bash
# Soak: runs a scenario at 1000 calls/s (10 round_robin clients on 5 pods,
# MaxConnectionAge 5s so connections churn too) for SOAK_SECONDS (default
# 600), samples the process's RSS every 10 s, and says whether it stayed
# flat: the mean RSS of its last minute within 10% of that of the minute
# after warm-up (60-120 s). Outside the
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
if [ "$n" -lt 18 ]; then echo "too few samples ($n): run at least 3 minutes"; exit 1; fi
# Flat means no growth: the mean of the last minute against the mean of the
# minute after warm-up (60-120 s). Go's collector lets the heap grow to
# twice what is live before it collects and returns memory later, so single
# samples swing; the peak is printed beside, as a ratio.
mean() { local sum=0; for v in "$@"; do sum=$((sum + v)); done; echo $((sum / $#)); }
first=$(mean "${samples[@]:6:6}")
last=$(mean "${samples[@]: -6}")
peak=0
for s in "${samples[@]:6}"; do [ "$s" -gt "$peak" ] && peak=$s; done
echo "RSS mean 60-120s ${first} KiB, last minute ${last} KiB ($(( (last - first) * 100 / first ))%), peak ${peak} KiB (+$(( (peak - first) * 100 / first ))%)"
if [ $((last * 10)) -le $((first * 11)) ] && [ $((last * 10)) -ge $((first * 9)) ]; then echo "flat: within 10%"; else echo "NOT flat: moved more than 10%"; exit 1; fi
