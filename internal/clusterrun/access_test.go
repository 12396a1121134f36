package clusterrun

import (
	"os"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestRBACFile: deploy/rbac/cluster-run.yaml's ClusterRole grants exactly
// Permissions, and its ClusterRoleBinding binds it.
func TestRBACFile(t *testing.T) {
	const path = "../../deploy/rbac/cluster-run.yaml"
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	if err := d.Decode(&role); err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(&binding); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					got = append(got, v+" "+g+"/"+res)
				}
			}
		}
	}
	var want []string
	for _, p := range Permissions {
		res := p.Resource
		if p.Subresource != "" {
			res += "/" + p.Subresource
		}
		want = append(want, p.Verb+" "+p.Group+"/"+res)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s grants\n  %q\nPermissions are\n  %q", path, got, want)
	}
	if role.Kind != "ClusterRole" || binding.Kind != "ClusterRoleBinding" || binding.RoleRef.Name != role.Name || binding.RoleRef.Kind != "ClusterRole" {
		t.Errorf("%s: a %s %s and a %s referring to %+v", path, role.Kind, role.Name, binding.Kind, binding.RoleRef)
	}
}
