// Package scenarios embeds pinlab's built-in scenarios. Each is an ordinary
// scenario file; `pinlab lab run NAME` runs one, and `pinlab lab run` runs
// Default.
package scenarios

import (
	"embed"
	"sort"
	"strings"
)

//go:embed *.yaml
var files embed.FS

// Default is the scenario `pinlab lab run` runs without an argument.
const Default = "scale-out"

// Get returns the built-in scenario called name (file name without .yaml).
func Get(name string) ([]byte, bool) {
	b, err := files.ReadFile(name + ".yaml")
	return b, err == nil
}

// Names lists the built-in scenarios.
func Names() []string {
	entries, _ := files.ReadDir(".")
	var out []string
	for _, e := range entries {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(out)
	return out
}
