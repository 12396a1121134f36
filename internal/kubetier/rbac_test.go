package kubetier

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pinlab/pinlab/internal/cli"
	"github.com/pinlab/pinlab/internal/evidence/evidencetest"
)

// TestDiagnoseLeastPrivilege: pinlab diagnose as a user (impersonated,
// --as alice) who has only what deploy/rbac/diagnose.yaml grants, bound in
// the namespace, checked by the real API server's RBAC. The pods serve no
// channelz. Without pods/exec (the file leaves it out) diagnose says so
// and never tries exec: could not tell, naming the agent. With a Role
// granting pods/exec it reads the pods through exec; with --agent-image
// and --yes it adds the agents (the file grants the PATCH): pinned both
// times.
func TestDiagnoseLeastPrivilege(t *testing.T) {
	ns := "least"
	ctx := setUp(t, ns, 2, "--no-channelz")
	source, err := clientIP()
	if err != nil {
		t.Fatal(err)
	}
	stop := startLoad(t, ns, source)
	defer stop()

	client := theLab.Cluster.Client()
	role, binding := evidencetest.ReadRBAC(t, "../../deploy/rbac/diagnose.yaml")
	role.Name = "pinlab-diagnose-" + ns // cluster-wide: one of this test's own
	binding.Namespace, binding.RoleRef.Name = ns, role.Name
	binding.Subjects = []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		client.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})
	})
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, &binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb strings.Builder
		code := cli.Main(append([]string{"diagnose", "pricing", "-n", ns, "--kubeconfig", kubeconfig, "--as", "alice", "--window", "3s"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errb := run()
	if code != cli.ExitUnknown || !strings.Contains(errb, "without create pods/exec in namespace least (optional") ||
		!strings.Contains(out, "pinlab-agent runs in 0 pods") || !strings.Contains(out, "exec is off (RBAC denies create pods/exec)") || strings.Contains(errb, "denies") {
		t.Errorf("without pods/exec: exit %d, want %d, the missing exec named and not tried, the agent named\nstdout:\n%s\nstderr:\n%s", code, cli.ExitUnknown, out, errb)
	}

	execRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "exec", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create"}}}}
	execBinding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "exec", Namespace: ns}, Subjects: binding.Subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "exec"}}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, execRole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, execBinding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	code, out, errb = run("--no-agent")
	if code != cli.ExitPinned || !strings.Contains(out, "read through exec") || strings.Contains(errb, "without create pods/exec") {
		t.Errorf("with pods/exec: exit %d, want %d through exec\nstdout:\n%s\nstderr:\n%s", code, cli.ExitPinned, out, errb)
	}

	code, out, errb = run("--agent-image", "registry.example/tools/pinlab-agent:test", "--yes")
	if code != cli.ExitPinned || !strings.Contains(out, "BYTES/S") || strings.Contains(errb, "denies") {
		t.Errorf("with --agent-image --yes: exit %d, want %d through the agents\nstdout:\n%s\nstderr:\n%s", code, cli.ExitPinned, out, errb)
	}
}
