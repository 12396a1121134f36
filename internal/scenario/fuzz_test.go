package scenario_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/pinlab/pinlab/internal/manifest"
	"github.com/pinlab/pinlab/internal/scenario"
	"github.com/pinlab/pinlab/scenarios"
)

var update = flag.Bool("update", false, "rewrite the fuzz seed corpus in testdata/fuzz/FuzzLoad")

// FuzzLoad feeds arbitrary files to the loader, as lab run (Load) and lab
// up (LoadObjects) read them: neither may panic, and every error must be a
// *manifest.Error that names a place in the file (a line, or the file as a
// whole). The seed corpus (testdata/fuzz/FuzzLoad) holds the built-in
// scenarios and manifests and the inputs of issue 15.
func FuzzLoad(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := scenario.Load("f.yaml", data)
		checkFuzzError(t, "Load", err)
		_, err = scenario.LoadObjects("f.yaml", data)
		checkFuzzError(t, "LoadObjects", err)
	})
}

func checkFuzzError(t *testing.T, fn string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var me *manifest.Error
	switch {
	case !errors.As(err, &me):
		t.Fatalf("%s: error %T is not a *manifest.Error: %v", fn, err, err)
	case me.File != "f.yaml":
		t.Fatalf("%s: error names file %q: %v", fn, me.File, err)
	case me.Line <= 0 && me.Doc != 0:
		t.Fatalf("%s: error in document %d without a line: %v", fn, me.Doc, err)
	case !strings.HasPrefix(err.Error(), "f.yaml"):
		t.Fatalf("%s: error does not start with the file: %v", fn, err)
	}
}

// fuzzSeeds are the seed corpus: every built-in, and the findings of
// issue 15 on the scale-out scenario.
func fuzzSeeds(t *testing.T) map[string][]byte {
	seeds := map[string][]byte{}
	for _, name := range scenarios.Manifests() {
		b, ok := scenarios.Get(name)
		if !ok {
			t.Fatalf("built-in %s missing", name)
		}
		seeds["builtin-"+name] = b
	}
	base := objects(2) + baseScenario
	for name, edit := range map[string][2]string{
		"age-1ns-args":         {"args: [pod, pricing]", "args: [pod, pricing, --max-connection-age, 1ns]"},
		"age-5ns-variant":      {"maxConnectionAge: 5s", "maxConnectionAge: 5ns"},
		"container-port-70000": {"containerPort: 8471", "containerPort: 70000"},
		"rate-nan":             {"rate: 100", "rate: .nan"},
		"rate-inf":             {"rate: 100", "rate: -.inf"},
		"timeout-0s":           {"    rate: 100", "    rate: 100\n    timeout: 0s"},
		"big-annotation":       {"    metadata: {labels: {app: pricing}}", "    metadata:\n      labels: {app: pricing}\n      annotations: {big: " + strings.Repeat("x", 256<<10) + "}"},
		"kube-system":          {"kind: Namespace\nmetadata: {name: shop}", "kind: Namespace\nmetadata: {name: shop}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: kube-system}"},
	} {
		if !strings.Contains(base, edit[0]) {
			t.Fatalf("seed %s: %q not in the base scenario", name, edit[0])
		}
		seeds[name] = []byte(strings.Replace(base, edit[0], edit[1], 1))
	}
	slice := "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: legacy-1\n  labels: {kubernetes.io/service-name: legacy}\naddressType: IPv4\nendpoints: [{addresses: [192.0.2.10]}]\n"
	seeds["endpointslice-before-service"] = []byte(slice + "---\napiVersion: v1\nkind: Service\nmetadata: {name: legacy}\nspec:\n  clusterIP: None\n  ports: [{port: 5432}]\n")
	seeds["too-many-objects"] = []byte(strings.Repeat("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n", scenario.MaxObjects+1))
	seeds["anchors"] = []byte("a: &a [1, 2]\nb: &b [*a, *a]\nc: [*b, *b, *b]\napiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
	return seeds
}

// TestFuzzCorpus keeps the seed corpus in testdata in step with the
// built-ins (go test -run FuzzCorpus -update rewrites it).
func TestFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzLoad")
	for name, data := range fuzzSeeds(t) {
		path := filepath.Join(dir, name)
		want := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s is missing or stale (%v); run go test ./internal/scenario -run FuzzCorpus -update", path, err)
		}
	}
	if entries, err := os.ReadDir(dir); err == nil && !*update {
		seeds := fuzzSeeds(t)
		for _, e := range entries {
			if _, ok := seeds[e.Name()]; !ok && !strings.HasPrefix(e.Name(), "found-") {
				t.Errorf("%s: not a seed; name corpus entries the fuzzer found found-<what>", filepath.Join(dir, e.Name()))
			}
		}
	}
}
