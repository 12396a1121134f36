package cli

import (
	"context"
	"testing"

	"github.com/pinlab/pinlab/internal/scenariotest"
)

// applyDocs is what kubectl apply takes against a real API server but lab
// up refused (issue 15): the kube-system Namespace, which every lab has
// already, an EndpointSlice before its Service, and one whose Service does
// not exist.
const applyDocs = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: legacy-1
  namespace: data
  labels: {kubernetes.io/service-name: legacy}
addressType: IPv4
ports: [{name: pg, port: 5432}]
endpoints: [{addresses: [192.0.2.10]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: later-1
  namespace: data
  labels: {kubernetes.io/service-name: later}
addressType: IPv4
ports: [{name: pg, port: 5432}]
endpoints: [{addresses: [192.0.2.11]}]
---
apiVersion: v1
kind: Namespace
metadata: {name: kube-system, labels: {team: platform}}
---
apiVersion: v1
kind: Namespace
metadata: {name: data}
---
apiVersion: v1
kind: Service
metadata: {name: legacy, namespace: data}
spec:
  clusterIP: None
  ports: [{name: pg, port: 5432}]
`

func TestLabUpAppliesAsKubectl(t *testing.T) {
	ctl, _ := upLab(t, scenariotest.WriteFile(t, "apply.yaml", applyDocs))
	objs, err := ctl.Objects(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	slices := map[string]bool{}
	for _, es := range objs.EndpointSlices {
		slices[es.Namespace+"/"+es.Name] = true
	}
	for _, name := range []string{"data/legacy-1", "data/later-1"} {
		if !slices[name] {
			t.Errorf("EndpointSlice %s missing; have %v", name, slices)
		}
	}
}
