package manifest

import (
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

const good = `# leading comment
apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: pricing
  namespace: shop
spec:
  replicas: 2
  selector:
    matchLabels: {app: pricing}
  template:
    metadata:
      labels: {app: pricing}
    spec:
      containers:
      - name: pricing
        image: pinlab
        args: [pod, pricing]
---
---
apiVersion: v1
kind: Service
metadata: {name: pricing, namespace: shop}
spec:
  ports:
  - {name: grpc, port: 8471, targetPort: grpc}
`

func TestParseGood(t *testing.T) {
	docs, err := Parse("good.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		kind string
		line int
		idx  int
	}{{"Namespace", 2, 1}, {"Deployment", 7, 2}, {"Service", 26, 4}}
	if len(docs) != len(want) {
		t.Fatalf("got %d documents, want %d", len(docs), len(want))
	}
	for i, w := range want {
		if docs[i].Kind != w.kind || docs[i].Line != w.line || docs[i].Index != w.idx {
			t.Errorf("doc %d = %s at line %d (#%d), want %s at line %d (#%d)", i, docs[i].Kind, docs[i].Line, docs[i].Index, w.kind, w.line, w.idx)
		}
	}
	obj, err := docs[1].Object()
	if err != nil {
		t.Fatal(err)
	}
	if d := obj.(*appsv1.Deployment); *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Args[1] != "pricing" {
		t.Errorf("decoded deployment wrong: %+v", d.Spec)
	}
	svc, err := docs[2].Object()
	if err != nil {
		t.Fatal(err)
	}
	if p := svc.(*corev1.Service).Spec.Ports[0]; p.TargetPort.StrVal != "grpc" {
		t.Errorf("targetPort = %v, want the name grpc", p.TargetPort)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error
	}{
		{
			name: "unknown field with suggestion",
			yaml: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: p\nspec:\n  replicass: 2\n",
			want: []string{"f.yaml:6:", "document 1", `Deployment "p"`, "spec.replicass", `did you mean "replicas"`},
		},
		{
			name: "unknown nested field in a list",
			yaml: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: p\nspec:\n  template:\n    spec:\n      containers:\n      - name: a\n        imagee: x\n",
			want: []string{"f.yaml:10:", "spec.template.spec.containers[0].imagee", `did you mean "image"`},
		},
		{
			name: "wrong type",
			yaml: "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  ports:\n  - port: abc\n",
			want: []string{"f.yaml:7:", "spec.ports", "expected an integer"},
		},
		{
			name: "unknown kind",
			yaml: "apiVersion: v1\nkind: Servce\nmetadata:\n  name: s\n",
			want: []string{"f.yaml:2:", "kind", "Servce is not a kind of v1"},
		},
		{
			name: "missing apiVersion",
			yaml: "kind: Service\nmetadata:\n  name: s\n",
			want: []string{"apiVersion", "missing"},
		},
		{
			name: "syntax error in second document",
			yaml: "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nkind: [\n",
			want: []string{"f.yaml:", "document 2", "YAML does not parse"},
		},
		{
			name: "duplicate key",
			yaml: "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  name: b\n",
			want: []string{"f.yaml:5:", "already defined"},
		},
		{
			name: "not a mapping",
			yaml: "- a\n- b\n",
			want: []string{"found a list"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := Parse("f.yaml", []byte(tt.yaml))
			if err == nil {
				_, err = docs[len(docs)-1].Object()
			}
			if err == nil {
				t.Fatal("no error")
			}
			var me *Error
			if !errors.As(err, &me) {
				t.Errorf("error %T is not a *manifest.Error", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
