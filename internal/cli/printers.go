package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pinlab/pinlab/internal/control"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// The tables below follow kubectl get's columns for each kind.

// filter keeps the objects of namespace ns ("" keeps all), sorted by
// namespace and name.
func filter(o control.Objects, ns string) control.Objects {
	keep := func(n string) bool { return ns == "" || n == ns }
	var out control.Objects
	for _, x := range o.Services {
		if keep(x.Namespace) {
			out.Services = append(out.Services, x)
		}
	}
	for _, x := range o.Pods {
		if keep(x.Namespace) {
			out.Pods = append(out.Pods, x)
		}
	}
	for _, x := range o.EndpointSlices {
		if keep(x.Namespace) {
			out.EndpointSlices = append(out.EndpointSlices, x)
		}
	}
	for _, x := range o.Deployments {
		if keep(x.Namespace) {
			out.Deployments = append(out.Deployments, x)
		}
	}
	for _, x := range o.StatefulSets {
		if keep(x.Namespace) {
			out.StatefulSets = append(out.StatefulSets, x)
		}
	}
	return out
}

// count returns how many objects of kind o holds.
func count(kind string, o control.Objects) int {
	switch kind {
	case "Service":
		return len(o.Services)
	case "Pod":
		return len(o.Pods)
	case "EndpointSlice":
		return len(o.EndpointSlices)
	case "Deployment":
		return len(o.Deployments)
	case "StatefulSet":
		return len(o.StatefulSets)
	}
	return 0
}

func printKind(w io.Writer, kind string, o control.Objects) {
	header, rows := kindRows(kind, o)
	table(w, header, rows)
}

// kindRows are the columns and rows lab get prints for kind, as kubectl
// get prints them.
func kindRows(kind string, o control.Objects) (header string, rows [][]string) {
	switch kind {
	case "Service":
		return serviceRows(o.Services)
	case "Pod":
		return podRows(o.Pods)
	case "EndpointSlice":
		return sliceRows(o.EndpointSlices)
	case "Deployment":
		return deploymentRows(o.Deployments)
	case "StatefulSet":
		return statefulSetRows(o.StatefulSets)
	}
	return "", nil
}

func age(t time.Time) string { return duration.HumanDuration(time.Since(t)) }

func table(w io.Writer, header string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range sortRows(rows) {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// sortRows sorts rows by namespace and name, their first two cells.
func sortRows(rows [][]string) [][]string {
	sort.Slice(rows, func(i, j int) bool { return strings.Join(rows[i][:2], "/") < strings.Join(rows[j][:2], "/") })
	return rows
}

func serviceRows(svcs []corev1.Service) (header string, rows [][]string) {
	for _, s := range svcs {
		ip, ext := s.Spec.ClusterIP, "<none>"
		if s.Spec.Type == corev1.ServiceTypeExternalName {
			ip, ext = "<none>", s.Spec.ExternalName
		}
		var ports []string
		for _, p := range s.Spec.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
		if len(ports) == 0 {
			ports = []string{"<none>"}
		}
		rows = append(rows, []string{s.Namespace, s.Name, string(s.Spec.Type), ip, ext, strings.Join(ports, ","), age(s.CreationTimestamp.Time)})
	}
	return "NAMESPACE\tNAME\tTYPE\tCLUSTER-IP\tEXTERNAL-IP\tPORT(S)\tAGE", rows
}

func podStatus(p corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "Terminating"
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil && cs.State.Waiting.Reason != "" {
			return cs.State.Waiting.Reason
		}
	}
	if p.Status.Phase == corev1.PodPending && p.Status.PodIP != "" {
		return "ContainerCreating"
	}
	return string(p.Status.Phase)
}

func podRows(pods []corev1.Pod) (header string, rows [][]string) {
	for _, p := range pods {
		ready := 0
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Ready {
				ready++
			}
		}
		ip := p.Status.PodIP
		if ip == "" {
			ip = "<none>"
		}
		rows = append(rows, []string{p.Namespace, p.Name, fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)), podStatus(p), "0", age(p.CreationTimestamp.Time), ip})
	}
	return "NAMESPACE\tNAME\tREADY\tSTATUS\tRESTARTS\tAGE\tIP", rows
}

func sliceRows(slices []discoveryv1.EndpointSlice) (header string, rows [][]string) {
	for _, s := range slices {
		var ports []string
		for _, p := range s.Ports {
			if p.Port != nil {
				ports = append(ports, fmt.Sprint(*p.Port))
			}
		}
		if len(ports) == 0 {
			ports = []string{"<unset>"}
		}
		var addrs []string
		for _, ep := range s.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
		eps := "<unset>"
		switch {
		case len(addrs) > 3:
			eps = strings.Join(addrs[:3], ",") + fmt.Sprintf(" + %d more...", len(addrs)-3)
		case len(addrs) > 0:
			eps = strings.Join(addrs, ",")
		}
		rows = append(rows, []string{s.Namespace, s.Name, string(s.AddressType), strings.Join(ports, ","), eps, age(s.CreationTimestamp.Time)})
	}
	return "NAMESPACE\tNAME\tADDRESSTYPE\tPORTS\tENDPOINTS\tAGE", rows
}

func deploymentRows(ds []appsv1.Deployment) (header string, rows [][]string) {
	for _, d := range ds {
		rows = append(rows, []string{d.Namespace, d.Name, fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, *d.Spec.Replicas),
			fmt.Sprint(d.Status.UpdatedReplicas), fmt.Sprint(d.Status.AvailableReplicas), age(d.CreationTimestamp.Time)})
	}
	return "NAMESPACE\tNAME\tREADY\tUP-TO-DATE\tAVAILABLE\tAGE", rows
}

func statefulSetRows(ss []appsv1.StatefulSet) (header string, rows [][]string) {
	for _, s := range ss {
		rows = append(rows, []string{s.Namespace, s.Name, fmt.Sprintf("%d/%d", s.Status.ReadyReplicas, *s.Spec.Replicas), age(s.CreationTimestamp.Time)})
	}
	return "NAMESPACE\tNAME\tREADY\tAGE", rows
}

func printServices(w io.Writer, svcs []corev1.Service) {
	header, rows := serviceRows(svcs)
	table(w, header, rows)
}
