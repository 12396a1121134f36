package control

import (
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// The tables below follow kubectl get's columns for each kind (lab get,
// the dashboard's objects).

// Filter keeps the objects of namespace ns ("" keeps all), sorted by
// namespace and name.
func Filter(o Objects, ns string) Objects {
	keep := func(n string) bool { return ns == "" || n == ns }
	var out Objects
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

// Count returns how many objects of kind o holds.
func Count(kind string, o Objects) int {
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

// Rows are the columns (tab-separated) and rows lab get prints for kind
// ("Service", "Pod", "EndpointSlice", "Deployment", "StatefulSet"), as
// kubectl get prints them, sorted by namespace and name.
func Rows(kind string, o Objects) (header string, rows [][]string) {
	switch kind {
	case "Service":
		header, rows = serviceRows(o.Services)
	case "Pod":
		header, rows = podRows(o.Pods)
	case "EndpointSlice":
		header, rows = sliceRows(o.EndpointSlices)
	case "Deployment":
		header, rows = deploymentRows(o.Deployments)
	case "StatefulSet":
		header, rows = statefulSetRows(o.StatefulSets)
	}
	return header, sortRows(rows)
}

func age(t time.Time) string { return duration.HumanDuration(time.Since(t)) }

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
