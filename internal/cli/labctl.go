package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/spf13/cobra"
)

// CtlOptions are the inputs shared by the commands that talk to a running
// lab: get, scale, delete, unready, ready.
type CtlOptions struct {
	Control   string
	Namespace string
	// AllNamespaces lists every namespace (get only).
	AllNamespaces bool
	Out           io.Writer
}

func (o *CtlOptions) client() *control.Client { return &control.Client{Addr: o.Control} }

func (o *CtlOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Control, "control", control.DefaultAddr, "control API address of the running lab")
	cmd.Flags().StringVarP(&o.Namespace, "namespace", "n", "default", "namespace")
}

// kindAliases maps kubectl's resource names and short names to kinds.
var kindAliases = map[string]string{
	"svc": "Service", "service": "Service", "services": "Service",
	"po": "Pod", "pod": "Pod", "pods": "Pod",
	"endpointslice": "EndpointSlice", "endpointslices": "EndpointSlice",
	"deploy": "Deployment", "deployment": "Deployment", "deployments": "Deployment",
	"sts": "StatefulSet", "statefulset": "StatefulSet", "statefulsets": "StatefulSet",
}

// splitRef parses "deployment/pricing" (or "deployment pricing" as two
// args) into a kind and a name.
func splitRef(args []string) (kind, name string, err error) {
	var res string
	switch len(args) {
	case 1:
		var ok bool
		if res, name, ok = strings.Cut(args[0], "/"); !ok {
			return "", "", usageError{fmt.Errorf("%q: expected KIND/NAME such as deployment/pricing", args[0])}
		}
	case 2:
		res, name = args[0], args[1]
	default:
		return "", "", usageError{fmt.Errorf("expected KIND/NAME such as deployment/pricing")}
	}
	kind, ok := kindAliases[strings.ToLower(res)]
	if !ok || name == "" {
		return "", "", usageError{fmt.Errorf("%q: unknown kind", res)}
	}
	return kind, name, nil
}

// NewCmdLabScale returns `pinlab lab scale`.
func NewCmdLabScale(stdout io.Writer) *cobra.Command {
	o := &CtlOptions{Out: stdout}
	var replicas int32
	cmd := &cobra.Command{
		Use:   "scale KIND/NAME --replicas N",
		Short: "Set a Deployment's or StatefulSet's replicas in the running lab",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, err := splitRef(args)
			if err != nil {
				return err
			}
			if kind != "Deployment" && kind != "StatefulSet" {
				return usageError{fmt.Errorf("cannot scale a %s; expected deployment or statefulset", kind)}
			}
			if !cmd.Flags().Changed("replicas") {
				return usageError{fmt.Errorf("--replicas is required")}
			}
			if err := o.client().Scale(cmd.Context(), control.ScaleRequest{Kind: kind, Namespace: o.Namespace, Name: name, Replicas: replicas}); err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "%s/%s scaled\n", strings.ToLower(kind), name)
			return nil
		},
	}
	o.flags(cmd)
	cmd.Flags().Int32Var(&replicas, "replicas", 0, "the new number of replicas")
	return cmd
}

// NewCmdLabDelete returns `pinlab lab delete`.
func NewCmdLabDelete(stdout io.Writer) *cobra.Command {
	o := &CtlOptions{Out: stdout}
	cmd := &cobra.Command{
		Use:   "delete pod/NAME",
		Short: "Delete a pod gracefully in the running lab (its controller replaces it)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, err := splitRef(args)
			if err != nil {
				return err
			}
			if kind != "Pod" {
				return usageError{fmt.Errorf("only pods can be deleted, got %s", kind)}
			}
			if err := o.client().DeletePod(cmd.Context(), o.Namespace, name); err != nil {
				return err
			}
			fmt.Fprintf(o.Out, "pod %q deleted\n", name)
			return nil
		},
	}
	o.flags(cmd)
	return cmd
}

// NewCmdLabReady returns `pinlab lab unready` (ready false) or `pinlab lab
// ready` (ready true).
func NewCmdLabReady(stdout io.Writer, ready bool) *cobra.Command {
	o := &CtlOptions{Out: stdout}
	use, short := "unready pod/NAME", "Mark a pod not ready (its server keeps serving), as a failing readiness probe would"
	if ready {
		use, short = "ready pod/NAME", "Hand a pod's readiness back to its probe after unready"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, err := splitRef(args)
			if err != nil {
				return err
			}
			if kind != "Pod" {
				return usageError{fmt.Errorf("readiness is a pod's, got %s", kind)}
			}
			if err := o.client().SetReady(cmd.Context(), o.Namespace, name, ready); err != nil {
				return err
			}
			state := "not ready"
			if ready {
				state = "back to its readiness probe"
			}
			fmt.Fprintf(o.Out, "pod %q %s\n", name, state)
			return nil
		},
	}
	o.flags(cmd)
	return cmd
}

// NewCmdLabGet returns `pinlab lab get`.
func NewCmdLabGet(stdout io.Writer) *cobra.Command {
	o := &CtlOptions{Out: stdout}
	cmd := &cobra.Command{
		Use:   "get KINDS",
		Short: "List objects of the running lab as kubectl get does (e.g. svc,pods,endpointslices)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var kinds []string
			for _, k := range strings.Split(args[0], ",") {
				kind, ok := kindAliases[strings.ToLower(k)]
				if !ok {
					return usageError{fmt.Errorf("%q: unknown kind; expected svc, pods, endpointslices, deployments or statefulsets", k)}
				}
				kinds = append(kinds, kind)
			}
			return labGet(cmd.Context(), o, kinds)
		},
	}
	o.flags(cmd)
	cmd.Flags().BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "list every namespace")
	return cmd
}

func labGet(ctx context.Context, o *CtlOptions, kinds []string) error {
	objs, err := o.client().Objects(ctx)
	if err != nil {
		return err
	}
	ns := o.Namespace
	if o.AllNamespaces {
		ns = ""
	}
	for i, k := range kinds {
		if i > 0 {
			fmt.Fprintln(o.Out)
		}
		printKind(o.Out, k, filter(objs, ns))
	}
	return nil
}
