package lab

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pinlab/pinlab/internal/kubeapi"
	appsv1 "k8s.io/api/apps/v1"
)

// TestWaitReadyPermanent: a pod of an image the lab's node does not run
// waits with ErrImagePull, which the node never retries, so WaitReady
// fails at once (not when its ctx ends) and names the workload, its ready
// count and the reason, prefixed "lab:".
func TestWaitReadyPermanent(t *testing.T) {
	l := startLab(t, Config{}, nil)
	objs := pricing(1)
	objs[len(objs)-1].(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Image = "nginx:1.27"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := l.Apply(ctx, objs); err != nil {
		t.Fatal(err)
	}
	err := l.WaitReady(ctx)
	var short *kubeapi.NotReadyError
	if !errors.As(err, &short) || !short.Permanent || ctx.Err() != nil ||
		!strings.HasPrefix(err.Error(), "lab: Deployment shop/pricing: 0 of 1 pods ready (pod pricing-") || !strings.Contains(err.Error(), ": ErrImagePull: ") {
		t.Errorf("WaitReady: %v (ctx: %v); want at once lab: Deployment shop/pricing: 0 of 1 pods ready (pod pricing-...: ErrImagePull: ...)", err, ctx.Err())
	}
}
