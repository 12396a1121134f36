package kubelet

import "testing"

// TestIsAgentImage: the repository's last element names the agent, any
// registry, tag or digest; nothing else is the agent.
func TestIsAgentImage(t *testing.T) {
	for _, tc := range []struct {
		image string
		want  bool
	}{
		{"pinlab-agent", true},
		{"pinlab-agent:v1", true},
		{"registry.example.com:5000/tools/pinlab-agent:v1", true},
		{"registry.example.com/pinlab-agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", true},
		{"localhost:5000/pinlab-agent", true},
		{"busybox", false},
		{"pinlab-agent-debug:v1", false},
		{"pinlab-agent.example.com/busybox:1", false},
		{"registry.example.com/pinlab-agent/busybox", false},
		{"", false},
	} {
		if got := IsAgentImage(tc.image); got != tc.want {
			t.Errorf("IsAgentImage(%q) = %v, want %v", tc.image, got, tc.want)
		}
	}
}
