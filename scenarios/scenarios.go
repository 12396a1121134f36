// Package scenarios embeds pinlab's built-ins: scenarios (Kubernetes
// objects plus a Scenario document) for `pinlab lab run`, and, under lab/,
// manifests for `pinlab lab up`. `pinlab lab run` without an argument runs
// Default.
package scenarios

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.yaml lab/*.yaml
var files embed.FS

// Default is the scenario `pinlab lab run` runs without an argument.
const Default = "scale-out"

// Get returns the built-in called name (file name without .yaml), looking
// at scenarios first, then lab manifests.
func Get(name string) ([]byte, bool) {
	for _, p := range []string{name + ".yaml", "lab/" + name + ".yaml"} {
		if b, err := files.ReadFile(p); err == nil {
			return b, true
		}
	}
	return nil, false
}

// Names lists the built-in scenarios.
func Names() []string { return list(".") }

// Manifests lists the built-in manifests for `pinlab lab up` (every
// scenario works there too).
func Manifests() []string { return append(list("lab"), Names()...) }

func list(dir string) []string {
	entries, _ := fs.ReadDir(files, dir)
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
		}
	}
	sort.Strings(out)
	return out
}
