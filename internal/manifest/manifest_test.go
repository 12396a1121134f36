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
			name: "port beyond int32",
			yaml: "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  ports:\n  - port: 3000000000\n",
			want: []string{"f.yaml:7:", "spec.ports[0].port", "3000000000 is out of range; expected an integer from -2147483648 to 2147483647"},
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
			name: "bytes that are not UTF-8, at their line",
			yaml: "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: \xff}\n",
			want: []string{"f.yaml:7:", "invalid leading UTF-8 octet"},
		},
		{
			name: "NaN at its field", // issue 15: it named the document's first line and no field
			yaml: "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  ports:\n  - port: .nan\n",
			want: []string{"f.yaml:7:", `Service "s"`, "spec.ports[0].port: .nan is not a finite number"},
		},
		{
			name: "infinity in a list",
			yaml: "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\nspec:\n  x: [1, -.Inf]\n",
			want: []string{"f.yaml:6:", "spec.x[1]: -.Inf is not a finite number"},
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

// TestSyntaxErrorLines: YAML syntax errors name the line a reader should
// look at. yaml.v3 gives parser errors a line one too low (the 0-based
// line of the construct being parsed).
func TestSyntaxErrorLines(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		line int
		want string
	}{
		{name: "unclosed brace", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: x\nspec:\n  ports: []\n",
			line: 3, want: "the { opened on line 3 is not closed (parsing stopped at line 4)"},
		{name: "unclosed brace at end of file", yaml: "apiVersion: v1\nkind: Service\nmetadata: {name: x\n",
			line: 3, want: "did not find expected ',' or '}'"},
		{name: "unclosed bracket in second document", yaml: "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nb: [1, 2\nc: 3\n",
			line: 5, want: "the [ opened on line 5 is not closed (parsing stopped at line 6)"},
		{name: "bad indentation in a nested mapping", yaml: "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  labels:\n    a: b\n   c: d\nspec: {}\n",
			line: 7, want: "did not find expected key (check the indentation"},
		{name: "list item under a mapping", yaml: "a:\n  b: 1\n  - c\n", line: 3, want: "did not find expected key"},
		{name: "sequence outdented", yaml: "spec:\n  ports:\n  - port: 1\n - port: 2\n", line: 4, want: "did not find expected key"},
		{name: "missing value at end", yaml: "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\nkind: [\n",
			line: 5, want: "document 2"},
		{name: "scanner error keeps its line", yaml: "a: 1\nb: c: d\n", line: 2, want: "mapping values are not allowed"},
		{name: "unterminated quote", yaml: "a: 'x\nb: 1\n", line: 3, want: "found unexpected end of stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.yaml))
			var me *Error
			if !errors.As(err, &me) {
				t.Fatalf("Parse error %v, want a *manifest.Error", err)
			}
			if me.Line != tt.line || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q at line %d; want line %d and %q", err, me.Line, tt.line, tt.want)
			}
		})
	}
}

// TestMapValueErrors: a value of the wrong type in a map of strings
// (labels, annotations, selectors) is reported at its own key, quoted.
func TestMapValueErrors(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		line  int
		field string
		want  string
	}{
		{name: "number label", yaml: "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  labels: {x: 1}\n",
			line: 5, field: "metadata.labels.x", want: `cannot use a number here; expected a string (quote it: "1")`},
		{name: "yes annotation", yaml: "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  annotations:\n    a: b\n    x: yes\n",
			line: 7, field: "metadata.annotations.x", want: `expected a string (quote it: "yes")`},
		{name: "selector in a template", yaml: "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  template:\n    metadata:\n      labels:\n        app: x\n        v: 2.0\n",
			line: 10, field: "spec.template.metadata.labels.v", want: `(quote it: "2.0")`},
		{name: "labels as a list", yaml: "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n  labels: [a]\n",
			line: 5, field: "metadata.labels", want: "cannot use a list here; expected a mapping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := Parse("f.yaml", []byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			_, err = docs[0].Object()
			var me *Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v, want a *manifest.Error", err)
			}
			if me.Line != tt.line || me.Field != tt.field || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q (line %d, field %q); want line %d, field %q and %q", err, me.Line, me.Field, tt.line, tt.field, tt.want)
			}
		})
	}
}
