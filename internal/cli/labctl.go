package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/pinlab/pinlab/internal/control"
	"github.com/pinlab/pinlab/internal/exit"
	"github.com/spf13/cobra"
)

// CtlOptions are the inputs shared by the commands that talk to a running
// lab: get, scale, delete, unready, ready.
type CtlOptions struct {
	Control string
	// TokenFile holds the lab's token; empty means control.TokenPath of
	// Control.
	TokenFile string
	Namespace string
	// AllNamespaces lists every namespace (get only).
	AllNamespaces bool
	// Out receives tables; Err receives kubectl's "No resources found".
	Out, Err io.Writer
}

func (o *CtlOptions) client() *control.Client {
	return &control.Client{Addr: o.Control, TokenFile: o.TokenFile}
}

func (o *CtlOptions) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Control, "control", control.DefaultAddr, "control API address of the running lab")
	cmd.Flags().StringVar(&o.TokenFile, "token-file", "", "file with the lab's token, as pinlab lab up printed it (default: the one lab up writes for --control)")
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

const kindList = "svc, pods, endpointslices, deployments or statefulsets"

// ref names one object: its kind and name.
type ref struct{ kind, name string }

// parseRefs reads object references the way kubectl does: KIND/NAME
// arguments ("pod/db-0 pod/db-1"), or a kind followed by names ("pod db-0
// db-1"). With defaultKind set, bare names are of that kind ("db-0" is a
// pod for delete). many allows more than one reference. Errors are usage
// errors that say what was expected.
func parseRefs(args []string, defaultKind string, many bool) ([]ref, error) {
	example := "deployment/pricing"
	if defaultKind == "Pod" {
		example = "pod/db-0 (or just db-0)"
	}
	if len(args) == 0 {
		return nil, exit.UsageError(fmt.Errorf("expected KIND/NAME such as %s", example))
	}
	var refs []ref
	switch first := args[0]; {
	case strings.Contains(first, "/"):
		for _, a := range args {
			r, err := splitSlash(a, example)
			if err != nil {
				return nil, err
			}
			refs = append(refs, r)
		}
	case kindAliases[strings.ToLower(first)] != "":
		kind := kindAliases[strings.ToLower(first)]
		if len(args) == 1 {
			return nil, exit.UsageError(fmt.Errorf("%q: missing the name: expected %s NAME or %s/NAME", first, first, first))
		}
		for _, name := range args[1:] {
			if strings.Contains(name, "/") {
				return nil, exit.UsageError(fmt.Errorf("%q: give either %s NAME or KIND/NAME, not both", name, first))
			}
			refs = append(refs, ref{kind, name})
		}
	case defaultKind != "":
		for _, name := range args {
			if strings.Contains(name, "/") {
				return nil, exit.UsageError(fmt.Errorf("%q: give either NAMEs or KIND/NAMEs, not both", name))
			}
			refs = append(refs, ref{defaultKind, name})
		}
	default:
		return nil, exit.UsageError(fmt.Errorf("%q: expected KIND/NAME such as %s", first, example))
	}
	if !many && len(refs) > 1 {
		return nil, exit.UsageError(fmt.Errorf("expected one KIND/NAME, got %d: %s", len(refs), strings.Join(args, " ")))
	}
	return refs, nil
}

// splitSlash parses one "KIND/NAME".
func splitSlash(arg, example string) (ref, error) {
	res, name, _ := strings.Cut(arg, "/")
	kind, ok := kindAliases[strings.ToLower(res)]
	switch {
	case res == "":
		return ref{}, exit.UsageError(fmt.Errorf("%q: missing the kind before the slash: expected KIND/NAME such as %s", arg, example))
	case !ok:
		return ref{}, exit.UsageError(fmt.Errorf("%q: unknown kind %q; expected %s", arg, res, kindList))
	case name == "":
		return ref{}, exit.UsageError(fmt.Errorf("%q: missing the name after the slash: expected %s/NAME", arg, res))
	case strings.Contains(name, "/"):
		return ref{}, exit.UsageError(fmt.Errorf("%q: expected one slash, as in %s", arg, example))
	}
	return ref{kind, name}, nil
}

// NewCmdLabScale returns `pinlab lab scale`.
func NewCmdLabScale(stdout io.Writer) *cobra.Command {
	o := &CtlOptions{Out: stdout}
	var replicas int32
	cmd := &cobra.Command{
		Use:   "scale KIND/NAME --replicas N",
		Short: "Set a Deployment's or StatefulSet's replicas in the running lab",
		RunE: func(cmd *cobra.Command, args []string) error {
			refs, err := parseRefs(args, "", false)
			if err != nil {
				return err
			}
			kind, name := refs[0].kind, refs[0].name
			if kind != "Deployment" && kind != "StatefulSet" {
				return exit.UsageError(fmt.Errorf("cannot scale a %s; expected deployment or statefulset", kind))
			}
			if !cmd.Flags().Changed("replicas") {
				return exit.UsageError(fmt.Errorf("--replicas is required"))
			}
			if replicas < 0 || replicas > control.MaxReplicas {
				return exit.UsageError(fmt.Errorf("--replicas %d: expected 0 to %d", replicas, control.MaxReplicas))
			}
			if err := o.client().Scale(cmd.Context(), control.ScaleRequest{Kind: kind, Namespace: o.Namespace, Name: name, Replicas: &replicas}); err != nil {
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
		Use:   "delete pod/NAME... | NAME...",
		Short: "Delete pods gracefully in the running lab (their controllers replace them)",
		Long: `Delete pods gracefully, as kubectl delete pod does: pod/db-0, pod db-0 db-1,
or just the pod names (only pods can be deleted).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			refs, err := parseRefs(args, "Pod", true)
			if err != nil {
				return err
			}
			for _, r := range refs {
				if r.kind != "Pod" {
					return exit.UsageError(fmt.Errorf("%s/%s: only pods can be deleted", strings.ToLower(r.kind), r.name))
				}
			}
			for _, r := range refs {
				if err := o.client().DeletePod(cmd.Context(), o.Namespace, r.name); err != nil {
					return err
				}
				fmt.Fprintf(o.Out, "pod %q deleted\n", r.name)
			}
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
		RunE: func(cmd *cobra.Command, args []string) error {
			refs, err := parseRefs(args, "Pod", false)
			if err != nil {
				return err
			}
			kind, name := refs[0].kind, refs[0].name
			if kind != "Pod" {
				return exit.UsageError(fmt.Errorf("readiness is a pod's, got %s", kind))
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
func NewCmdLabGet(stdout, stderr io.Writer) *cobra.Command {
	o := &CtlOptions{Out: stdout, Err: stderr}
	cmd := &cobra.Command{
		Use:   "get KINDS",
		Short: "List objects of the running lab as kubectl get does (e.g. svc,pods,endpointslices)",
		Args: func(_ *cobra.Command, args []string) error {
			switch len(args) {
			case 0:
				return exit.UsageError(fmt.Errorf("lab get needs the kinds to list, e.g. pinlab lab get svc,pods,endpointslices (kinds: %s)", kindList))
			case 1:
				return nil
			}
			return exit.UsageError(fmt.Errorf("lab get takes one comma-separated list of kinds, got %d arguments: %s", len(args), strings.Join(args, " ")))
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var kinds []string
			for _, k := range strings.Split(args[0], ",") {
				kind, ok := kindAliases[strings.ToLower(k)]
				if !ok {
					return exit.UsageError(fmt.Errorf("%q: unknown kind; expected %s", k, kindList))
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

// labGet prints a table per kind that has objects, as kubectl get does,
// and kubectl's "No resources found" line on Err when none has.
func labGet(ctx context.Context, o *CtlOptions, kinds []string) error {
	objs, err := o.client().Objects(ctx)
	if err != nil {
		return err
	}
	ns := o.Namespace
	if o.AllNamespaces {
		ns = ""
	}
	printed := 0
	for _, k := range kinds {
		sel := control.Filter(objs, ns)
		if control.Count(k, sel) == 0 {
			continue
		}
		if printed > 0 {
			fmt.Fprintln(o.Out)
		}
		printKind(o.Out, k, sel)
		printed++
	}
	if printed == 0 {
		if ns == "" {
			fmt.Fprintln(o.Err, "No resources found")
		} else {
			fmt.Fprintf(o.Err, "No resources found in %s namespace.\n", ns)
		}
	}
	return nil
}
