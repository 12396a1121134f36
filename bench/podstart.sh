#!/usr/bin/env bash
# Pod start-up on the real control plane tier, with each pod in its own
# network namespace (--pod-network netns) and with pods sharing the lab's
# (shared), measured side by side: for each pod count (PODS, default
# "100 300") and mode, `pinlab lab up --control-plane kubernetes` starts
# the scale-out manifests, kubectl scales pricing to the count, and the
# time until every pod is Ready (polled every 0.2 s) and the inner
# pinlab's RSS are printed, then the netns/shared ratio. Needs the control
# plane and CNI builds (build/controlplane/build.sh, build/cni/build.sh);
# runs one lab at a time. Outside the default test run (about 2 min).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
go build -o "$dir/pinlab" ./cmd/pinlab

# run MODE N: sets secs and rss (MB); runs in this shell, so that the
# trap stops the lab it started.
run() {
  local mode=$1 n=$2 log="$dir/up-$1-$2.log"
  "$dir/pinlab" lab up --control-plane kubernetes --pod-network "$mode" --control 127.0.0.1:0 \
    --token-file "$dir/token" > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do grep -q "export KUBECONFIG" "$log" && break; sleep 0.5; done
  grep -q "export KUBECONFIG" "$log" || { cat "$log" >&2; exit 1; }
  local kc k
  kc=$(awk '/export KUBECONFIG/{sub("KUBECONFIG=","",$2); print $2}' "$log")
  k=$(awk '/get pods -o wide -A/{print $1; exit}' "$log")
  "$k" --kubeconfig "$kc" wait --for=condition=Ready pods --all -n shop --timeout=60s >/dev/null
  local start end inner
  start=$(date +%s.%N)
  "$k" --kubeconfig "$kc" scale -n shop deploy/pricing --replicas="$n" >/dev/null
  local ready=0
  for _ in $(seq 1 1500); do
    if [ "$("$k" --kubeconfig "$kc" get pods -n shop --no-headers | grep -c ' 1/1 ')" -ge "$n" ]; then ready=1; break; fi
    sleep 0.2
  done
  end=$(date +%s.%N)
  [ "$ready" = 1 ] || { echo "podstart: $n pods not Ready within 300 s ($mode)" >&2; exit 1; }
  # The inner pinlab (in the lab's namespace) is the outer's child.
  inner=$(pgrep -P "$pid" | head -1)
  secs=$(echo "$end - $start" | bc)
  rss=$(( $(awk '/VmRSS/{print $2}' "/proc/$inner/status") / 1024 ))
  kill -INT "$pid"; wait "$pid" || true; pid=
}

printf "%-6s %-7s %10s %8s   %s\n" pods mode ready_s rss_MB load
for n in ${PODS:-100 300}; do
  declare -A took=()
  for mode in netns shared; do
    run "$mode" "$n"
    took[$mode]=$secs
    printf "%-6s %-7s %10.2f %8s   %s\n" "$n" "$mode" "$secs" "$rss" "$(cut -d' ' -f1-3 /proc/loadavg)"
  done
  printf "%-6s netns/shared ready time: %.2fx\n" "$n" "$(echo "${took[netns]} / ${took[shared]}" | bc -l)"
done
