package plan

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Step is one timeline action at an offset from the start of load.
type Step struct {
	At time.Duration
	// Name labels the step so that expectations can name the pod it acted
	// on ("@<name>"); may be empty.
	Name   string
	Action Action
}

// Describe is the step for reports, e.g. "10s: scale Deployment pricing to
// 10".
func (s Step) Describe() string { return s.At.String() + ": " + s.Action.Describe() }

// Action is what a step does. Each kind of action is one type here with
// its description and how it is applied; package scenario checks and
// builds them from the file, in one table.
type Action interface {
	// Describe says what the action does, without the offset.
	Describe() string
	// Apply carries the action out through env. It returns the pod a pod
	// action acted on ("" for others), also when it fails after picking.
	Apply(ctx context.Context, env Env) (pod string, err error)
}

// Env is what actions act on: the running lab's workloads and pods, and
// the variant's load clients. The runner provides it.
type Env struct {
	Workloads Workloads
	Pods      Pods
	Clients   Clients
}

// Workloads changes Deployments and StatefulSets.
type Workloads interface {
	Scale(ctx context.Context, w Workload, replicas int32) error
	RolloutRestart(ctx context.Context, w Workload) error
	// UpdateTemplate sets the first container's image (if not empty) and
	// args (if not nil), which starts a rollout.
	UpdateTemplate(ctx context.Context, w Workload, image string, args []string) error
}

// Pods picks and acts on pods.
type Pods interface {
	// Pick returns the pod ref names now.
	Pick(ref PodRef) (namespace, name string, err error)
	// Do carries verb out on the pod; grace applies to PodDelete (nil: the
	// pod's own terminationGracePeriodSeconds).
	Do(ctx context.Context, verb PodVerb, namespace, name string, grace *int64) error
}

// Clients restarts and reconfigures the variant's load clients.
type Clients interface {
	// Restart replaces the channels of the named clients.
	Restart(names []string) error
	// Configure gives the clients (by Name) their new settings; new calls
	// use a new channel.
	Configure(clients []Client) error
}

// Workload is a Deployment or a StatefulSet of the plan.
type Workload struct {
	Kind, Namespace, Name string
	// PodLabels are the labels of the workload's pod template.
	PodLabels map[string]string
}

func (w Workload) String() string { return fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name) }

// Scale sets a workload's replicas.
type Scale struct {
	Workload Workload
	Replicas int32
}

func (a Scale) Describe() string {
	return fmt.Sprintf("scale %s %s to %d", a.Workload.Kind, a.Workload.Name, a.Replicas)
}

func (a Scale) Apply(ctx context.Context, env Env) (string, error) {
	return "", env.Workloads.Scale(ctx, a.Workload, a.Replicas)
}

// RolloutRestart restarts a workload's pods as kubectl rollout restart.
type RolloutRestart struct{ Workload Workload }

func (a RolloutRestart) Describe() string {
	return fmt.Sprintf("rollout restart %s %s", a.Workload.Kind, a.Workload.Name)
}

func (a RolloutRestart) Apply(ctx context.Context, env Env) (string, error) {
	return "", env.Workloads.RolloutRestart(ctx, a.Workload)
}

// Update changes a workload's pod template: the image (if not empty) and
// the args (if not nil).
type Update struct {
	Workload Workload
	Image    string
	Args     []string
}

func (a Update) Describe() string {
	var what []string
	if a.Image != "" {
		what = append(what, "image "+a.Image)
	}
	if a.Args != nil {
		what = append(what, fmt.Sprintf("args %v", a.Args))
	}
	return fmt.Sprintf("update %s %s (%s)", a.Workload.Kind, a.Workload.Name, strings.Join(what, ", "))
}

func (a Update) Apply(ctx context.Context, env Env) (string, error) {
	return "", env.Workloads.UpdateTemplate(ctx, a.Workload, a.Image, a.Args)
}

// RestartClients replaces clients' channels, as restarted client processes.
type RestartClients struct {
	// Selector is what the file named: a group or one client.
	Selector string
	Names    []string
}

func (a RestartClients) Describe() string { return "restart client " + a.Selector }

func (a RestartClients) Apply(_ context.Context, env Env) (string, error) {
	return "", env.Clients.Restart(a.Names)
}

// ConfigureClients gives running clients new settings, as a redeployed
// client with a new configuration.
type ConfigureClients struct {
	// Selector is what the file named: a group or one client; Change
	// describes what changes ("round_robin, 20 calls/s").
	Selector, Change string
	// Clients are the selected clients with their new settings.
	Clients []Client
}

func (a ConfigureClients) Describe() string {
	return fmt.Sprintf("configure client %s (%s)", a.Selector, a.Change)
}

func (a ConfigureClients) Apply(_ context.Context, env Env) (string, error) {
	return "", env.Clients.Configure(a.Clients)
}

// PodVerb is what a pod action does.
type PodVerb string

// Pod verbs. Delete goes through the API (graceful termination); the
// others act on the pod's container as the kubelet would see it.
const (
	PodDelete    PodVerb = "delete pod"
	PodKill      PodVerb = "kill pod"
	PodHang      PodVerb = "hang pod"
	PodResume    PodVerb = "resume pod"
	PodNotReady  PodVerb = "mark not ready"
	PodReady     PodVerb = "mark ready"
	PodUnhealthy PodVerb = "make unhealthy"
	PodHealthy   PodVerb = "make healthy"
)

// PodRef names the pod a pod action acts on: one pod by name, the pod an
// earlier step acted on, or one of a workload's pods that are not
// terminating, chosen by Pick when the step runs.
type PodRef struct {
	// Namespace and Name name one pod (Name empty: see Step and Workload).
	Namespace, Name string
	// Step names an earlier step whose pod this is (in Namespace).
	Step     string
	Workload Workload
	// Pick is busiest (most calls served so far), quietest, oldest or
	// newest.
	Pick string
}

func (r PodRef) String() string {
	switch {
	case r.Name != "":
		return r.Name
	case r.Step != "":
		return "the pod of step " + r.Step
	}
	return fmt.Sprintf("%s pod of %s %s", r.Pick, strings.ToLower(r.Workload.Kind), r.Workload.Name)
}

// PodAction acts on one pod.
type PodAction struct {
	Verb PodVerb
	Pod  PodRef
	// GracePeriodSeconds overrides the pod's grace period for PodDelete.
	GracePeriodSeconds *int64
}

func (a PodAction) Describe() string { return fmt.Sprintf("%s %s", a.Verb, a.Pod) }

func (a PodAction) Apply(ctx context.Context, env Env) (string, error) {
	ns, name, err := env.Pods.Pick(a.Pod)
	if err != nil {
		return "", err
	}
	return name, env.Pods.Do(ctx, a.Verb, ns, name, a.GracePeriodSeconds)
}
