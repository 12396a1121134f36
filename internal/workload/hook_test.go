package workload

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

func TestPreStopHook(t *testing.T) {
	exec := func(cmd ...string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: cmd}}
	}
	tests := []struct {
		name      string
		handler   *corev1.LifecycleHandler
		want      time.Duration
		wantField string // non-empty: a SpecError on this field
	}{
		{name: "sleep action", handler: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}, want: 5 * time.Second},
		{name: "sleep action zero", handler: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{}}, want: 0},
		{name: "sleep action past the grace", handler: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 31}}, wantField: "containers[0].lifecycle.preStop.sleep.seconds"},
		{name: "sleep action negative", handler: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: -1}}, wantField: "containers[0].lifecycle.preStop.sleep.seconds"},
		{name: "exec sleep", handler: exec("sleep", "10"), want: 10 * time.Second},
		{name: "exec sleep path and fraction", handler: exec("/bin/sleep", "0.5"), want: 500 * time.Millisecond},
		{name: "exec sleep minutes", handler: exec("sleep", "1m"), want: time.Minute},
		{name: "exec shell sleep", handler: exec("/bin/sh", "-c", "sleep 15"), want: 15 * time.Second},
		{name: "exec shell sleep with spaces", handler: exec("sh", "-c", "  sleep   2s "), want: 2 * time.Second},
		{name: "exec other command", handler: exec("/bin/sh", "-c", "nginx -s quit"), wantField: "containers[0].lifecycle.preStop.exec.command"},
		{name: "exec sleep then more", handler: exec("/bin/sh", "-c", "sleep 5 && kill 1"), wantField: "containers[0].lifecycle.preStop.exec.command"},
		{name: "exec bad duration", handler: exec("sleep", "soon"), wantField: "containers[0].lifecycle.preStop.exec.command"},
		{name: "exec infinite", handler: exec("sleep", "inf"), wantField: "containers[0].lifecycle.preStop.exec.command"},
		{name: "exec negative", handler: exec("sleep", "-3"), wantField: "containers[0].lifecycle.preStop.exec.command"},
		{name: "httpGet", handler: &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/quit"}}, wantField: "containers[0].lifecycle.preStop.httpGet"},
		{name: "no action", handler: &corev1.LifecycleHandler{}, wantField: "containers[0].lifecycle.preStop"},
	}
	grace := int64(30)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: tt.handler}}
			h, err := preStopHook(c, &grace)
			if tt.wantField != "" {
				var se *SpecError
				if !errors.As(err, &se) || se.Field != tt.wantField {
					t.Fatalf("error %v, want a SpecError on %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h == nil || h.Sleep != tt.want {
				t.Errorf("hook %+v, want a sleep of %v", h, tt.want)
			}
		})
	}
}
