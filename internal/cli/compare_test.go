package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/lab"
	"github.com/pinlab/pinlab/internal/labrun"
	"github.com/pinlab/pinlab/internal/report"
	"github.com/pinlab/pinlab/internal/stats"
)

// deterministicScaleOut is a short scale-out whose spread over pods does
// not rest on kube-proxy's random picks: one pick_first client through the
// ClusterIP (all its calls on one pod, whichever), and two round_robin
// clients on the headless Service (every pod resolved at start). Either
// way the two added pods stay idle until a re-resolution 30 s away.
const deterministicScaleOut = upManifest + headlessPricing + `---
apiVersion: pinlab.dev/v1alpha1
kind: Scenario
metadata: {name: short-scale-out}
spec:
  duration: 8s
  clients:
  - {name: order, namespace: shop, count: 1, target: pricing.shop.svc.cluster.local:8471, policy: pick_first, rate: 40}
  timeline:
  - at: 2s
    scale: {deployment: pricing, replicas: 4}
  windows:
  - {name: before, from: 500ms, to: 2s}
  - {name: after, from: 4s, to: 8s}
  variants:
  - name: clusterip
  - name: headless-rr
    clients: [{count: 2, target: "dns:///pricing-headless.shop.svc.cluster.local:8471", policy: round_robin}]
`

// TestCompareDataplanes runs lab run --compare-dataplanes (pinlab's
// dataplane, then the real kube-proxy in nftables mode, each variant on
// its own real control plane) on a short scale-out: the two dataplanes
// agree within tolerance on every figure, and on both the added pods
// stay idle.
func TestCompareDataplanes(t *testing.T) {
	requireControlPlane(t, lab.DataplaneKubeProxyNFTables)
	pinlab := buildPinlab(t)
	file := filepath.Join(t.TempDir(), "short.yaml")
	if err := os.WriteFile(file, []byte(deterministicScaleOut), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pinlab, "lab", "run", file, "--compare-dataplanes", "-o", "json", "--progress", "off", "--seed", "7")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var got labrun.Comparison
	if jerr := json.Unmarshal(stdout.Bytes(), &got); jerr != nil || got.Fidelity == nil {
		t.Fatalf("lab run --compare-dataplanes: %v; its JSON: %v\nstderr:\n%s", err, jerr, stderr.String())
	}
	for _, r := range got.Fidelity.Rows {
		if r.Differs {
			t.Errorf("%s / %s / %s: pinlab %s, kube-proxy-nftables %s (tolerance %s)", r.Variant, r.Window, r.Figure, r.A, r.B, r.Tolerance)
		}
	}
	if err != nil && exitCodeOf(err) != ExitDataplanesDiffer {
		t.Errorf("lab run --compare-dataplanes: %v\nstderr:\n%s", err, stderr.String())
	}
	for _, dp := range []string{"pinlab", "kube-proxy-nftables"} {
		res := got.Runs[dp]
		if res == nil || len(res.Variants) != 2 {
			t.Fatalf("run on %s: %v, want two variants", dp, res)
		}
		for _, v := range res.Variants {
			w, ok := windowOf(v, "after")
			if !ok || w.AddedPods != 2 || w.AddedShare != 0 {
				t.Errorf("%s, %s, after the scale-out: %d added pods with %.2f of the calls; want 2 idle", dp, v.Name, w.AddedPods, w.AddedShare)
			}
		}
	}
	t.Logf("fidelity: %d differences, %d by chance, over %d figures", got.Fidelity.Differences, got.Fidelity.ChanceDifferences, len(got.Fidelity.Rows))
}

// windowOf is v's window named name.
func windowOf(v report.Variant, name string) (stats.WindowStats, bool) {
	for _, w := range v.Summary.Windows {
		if w.Name == name {
			return w, true
		}
	}
	return stats.WindowStats{}, false
}
