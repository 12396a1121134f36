package endpoints

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestIsTCP(t *testing.T) {
	tests := []struct {
		name string
		p    v1.Protocol
		want bool
	}{
		{"TCP", v1.ProtocolTCP, true},
		{"empty is TCP", "", true},
		{"UDP", v1.ProtocolUDP, false},
		{"SCTP", v1.ProtocolSCTP, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsTCP(tt.p); got != tt.want {
				t.Errorf("IsTCP(%q) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestServicePortName(t *testing.T) {
	svc := &v1.Service{Spec: v1.ServiceSpec{Ports: []v1.ServicePort{
		{Name: "grpc", Port: 8471, Protocol: v1.ProtocolTCP},
		{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP},
		{Name: "metrics", Port: 9100},
	}}}
	tests := []struct {
		name   string
		number int32
		want   string
		wantOK bool
	}{
		{"TCP port", 8471, "grpc", true},
		{"empty protocol is TCP", 9100, "metrics", true},
		{"UDP port", 53, "", false},
		{"no such port", 1, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ServicePortName(svc, tt.number)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ServicePortName(%d) = %q, %v; want %q, %v", tt.number, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
