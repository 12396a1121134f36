package control

import (
	"errors"
	"fmt"
	"strings"
)

// MaxReplicas is the most replicas a scale call may ask for.
const MaxReplicas = 1000

// ScaleRequest sets a Deployment's or StatefulSet's replicas. Every field
// is required.
type ScaleRequest struct {
	// Kind is Deployment or StatefulSet, or one of kubectl's names for them
	// (deployment, deployments, deploy, statefulset, statefulsets, sts) in
	// any case.
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Replicas is 0 to MaxReplicas.
	Replicas *int32 `json:"replicas"`
}

// scaleKinds maps the accepted spellings of ScaleRequest.Kind, lowercased,
// to the kind.
var scaleKinds = map[string]string{
	"deployment": "Deployment", "deployments": "Deployment", "deploy": "Deployment",
	"statefulset": "StatefulSet", "statefulsets": "StatefulSet", "sts": "StatefulSet",
}

func (r *ScaleRequest) check() error {
	if _, ok := scaleKinds[strings.ToLower(r.Kind)]; !ok {
		return fmt.Errorf("kind %q: expected Deployment or StatefulSet (or deployment, deployments, deploy, statefulset, statefulsets, sts)", r.Kind)
	}
	if err := checkObject(r.Namespace, r.Name); err != nil {
		return err
	}
	switch {
	case r.Replicas == nil:
		return errors.New("replicas is required")
	case *r.Replicas < 0 || *r.Replicas > MaxReplicas:
		return fmt.Errorf("replicas %d: expected 0 to %d", *r.Replicas, MaxReplicas)
	}
	return nil
}

// PodRequest names a pod to delete. Both fields are required.
type PodRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (r *PodRequest) check() error { return checkObject(r.Namespace, r.Name) }

// ReadyRequest forces a pod not ready (Ready false) or gives its readiness
// back to its probe (Ready true). Every field is required.
type ReadyRequest struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Ready     *bool  `json:"ready"`
}

func (r *ReadyRequest) check() error {
	if err := checkObject(r.Namespace, r.Name); err != nil {
		return err
	}
	if r.Ready == nil {
		return errors.New("ready is required")
	}
	return nil
}
