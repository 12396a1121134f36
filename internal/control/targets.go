package control

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/pinlab/pinlab/internal/pod"
	"github.com/pinlab/pinlab/internal/workload"
	corev1 "k8s.io/api/core/v1"
)

// MetricsPortName is the name of a container port that serves a pod's
// Prometheus metrics.
const MetricsPortName = workload.MetricsPortName

// TargetGroup is one entry of a Prometheus file_sd file.
type TargetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// MetricsTargets returns a file_sd group per pod of pods that has a pod IP
// and a metrics port (workload.Container.MetricsPort), in pods' order. Labels
// are the pod's labels (characters Prometheus does not take in label names
// become _) plus namespace and pod.
func MetricsTargets(pods []corev1.Pod) []TargetGroup {
	var out []TargetGroup
	for _, p := range pods {
		w, err := workload.For(&p.Spec)
		if err != nil || w.MetricsPort == 0 || p.Status.PodIP == "" {
			continue
		}
		labels := map[string]string{}
		for k, v := range p.Labels {
			labels[labelName(k)] = v
		}
		labels["namespace"], labels["pod"] = p.Namespace, p.Name
		out = append(out, TargetGroup{Targets: []string{fmt.Sprintf("%s:%d", p.Status.PodIP, w.MetricsPort)}, Labels: labels})
	}
	return out
}

// labelName maps a Kubernetes label key to a Prometheus label name, as
// Prometheus's Kubernetes discovery does for __meta_kubernetes_pod_label_*.
func labelName(k string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, k)
}

// WriteScrapeConfig writes a prometheus.yml with one job, "pinlab", whose
// static_configs are groups (JSON is YAML, so each group is written as
// JSON).
func WriteScrapeConfig(w io.Writer, groups []TargetGroup, interval string) error {
	fmt.Fprintf(w, "global:\n  scrape_interval: %s\n  evaluation_interval: %s\nscrape_configs:\n- job_name: pinlab\n  metrics_path: %s\n  static_configs:\n", interval, interval, pod.MetricsPath)
	if len(groups) == 0 {
		fmt.Fprintf(w, "  - targets: []\n")
	}
	for _, g := range groups {
		b, err := json.Marshal(g)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "  - %s\n", b)
	}
	return nil
}
