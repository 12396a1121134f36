package clusterrun

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/evidence"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/pinlab/pinlab/internal/remote"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// TestClean: without a run named, clean deletes what killed and kept runs
// left and leaves (naming it) a run in progress; a run named is deleted
// even in progress; nothing is deleted unless confirmed.
func TestClean(t *testing.T) {
	for _, tt := range []struct {
		name      string
		run       string
		yes       bool
		want      []string // namespaces left after clean
		wantOut   string
		wantAsked string
		notAsked  string
	}{
		{"every run", "", true, []string{"pinlab-live0001-0"}, "run live0001 is in progress", "pinlab-dead0001-0 (run dead0001", "live0001"},
		{"the live run by name", "live0001", true, []string{"pinlab-dead0001-0"}, "deleted namespace pinlab-live0001-0", "IN PROGRESS", "dead0001"},
		{"not confirmed", "", false, []string{"pinlab-dead0001-0", "pinlab-live0001-0"}, "run live0001 is in progress", "pinlab-dead0001-0", "live0001"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset()
			thirty := int32(30)
			for run, renewed := range map[string]time.Duration{"live0001": 2 * time.Second, "dead0001": 10 * time.Minute} {
				ns := remote.Namespace(run, 0)
				renew := metav1.NewMicroTime(time.Now().Add(-renewed))
				for _, o := range []runtime.Object{
					&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{remote.RunLabel: run}}},
					&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: remote.LeaseName, Namespace: ns, Labels: map[string]string{remote.RunLabel: run}},
						Spec: coordinationv1.LeaseSpec{HolderIdentity: &run, LeaseDurationSeconds: &thirty, RenewTime: &renew}},
				} {
					if err := cs.Tracker().Add(o); err != nil {
						t.Fatal(err)
					}
				}
			}
			var out bytes.Buffer
			var asked string
			err := clean(t.Context(), cs, "https://10.0.0.1:6443", CleanOptions{Run: tt.run, Out: &out,
				Confirm: func(_ context.Context, s string) (bool, error) { asked = s; return tt.yes, nil }})
			if (err != nil) == tt.yes {
				t.Errorf("clean: %v", err)
			}
			list, err := cs.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, ns := range list.Items {
				left = append(left, ns.Name)
			}
			slices.Sort(left)
			if !slices.Equal(left, tt.want) {
				t.Errorf("left %q, want %q", left, tt.want)
			}
			if !strings.Contains(out.String(), tt.wantOut) || !strings.Contains(asked, tt.wantAsked) || strings.Contains(asked, tt.notAsked) {
				t.Errorf("said %q and asked %q; want %q and %q in them, and not %q", out.String(), asked, tt.wantOut, tt.wantAsked, tt.notAsked)
			}
		})
	}
}

// TestCleanBadRun: a --run that is no run ID is a usage error naming
// --run, before any call.
func TestCleanBadRun(t *testing.T) {
	err := Clean(t.Context(), CleanOptions{Run: "BAD RUN!", Kube: &evidence.Kube{Kubeconfig: filepath.Join(t.TempDir(), "none")}})
	if !exit.IsUsage(err) || !strings.Contains(fmt.Sprint(err), `--run "BAD RUN!"`) {
		t.Errorf("Clean(--run 'BAD RUN!') = %v; want a usage error naming --run", err)
	}
}
