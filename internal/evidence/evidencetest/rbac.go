package evidencetest

import (
	"bufio"
	"io"
	"os"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ReadRBAC decodes path's documents, strictly: one ClusterRole and one
// RoleBinding.
func ReadRBAC(t testing.TB, path string) (rbacv1.ClusterRole, rbacv1.RoleBinding) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		role    rbacv1.ClusterRole
		binding rbacv1.RoleBinding
		kinds   []string
	)
	docs := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for {
		doc, err := docs.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if meta.APIVersion != rbacv1.SchemeGroupVersion.String() {
			t.Errorf("%s: a %s has apiVersion %q, want %s", path, meta.Kind, meta.APIVersion, rbacv1.SchemeGroupVersion)
		}
		kinds = append(kinds, meta.Kind)
		var into any
		switch meta.Kind {
		case "ClusterRole":
			into = &role
		case "RoleBinding":
			into = &binding
		default:
			t.Fatalf("%s: unexpected kind %q", path, meta.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			t.Fatalf("%s: %s: %v", path, meta.Kind, err)
		}
	}
	if !slices.Equal(kinds, []string{"ClusterRole", "RoleBinding"}) {
		t.Fatalf("%s holds %q, want a ClusterRole and a RoleBinding", path, kinds)
	}
	return role, binding
}
