package scenario

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/manifest"
	"github.com/pinlab/pinlab/internal/plan"
	"github.com/pinlab/pinlab/scenarios"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Zone is the cluster domain of every lab.
const Zone = "cluster.local"

// Object is a Kubernetes object and the document it came from.
type Object struct {
	Doc manifest.Document
	Obj runtime.Object
	// patch is set on a variant's patched copy: errors about fields the
	// patch wrote point at the patch.
	patch *patchSite
}

// Errorf returns an error at field of the object: in the variant's patch
// when the patch wrote that field, else in the object's document.
func (o Object) Errorf(field, format string, args ...any) error {
	if p := o.patch; p != nil {
		if at, ok := p.locate(field); ok {
			return p.doc.Errorf(at, "%s %s: "+format, append([]any{o.Doc.What(), "as patched"}, args...)...)
		}
		return o.Doc.Errorf(field, "in variant %s (patched): "+format, append([]any{p.variant}, args...)...)
	}
	return o.Doc.Errorf(field, format, args...)
}

// Namespace is the object's namespace ("default" when unset; "" for a
// Namespace).
func (o Object) Namespace() string {
	if o.Doc.Kind == "Namespace" {
		return ""
	}
	if o.Doc.Namespace == "" {
		return metav1.NamespaceDefault
	}
	return o.Doc.Namespace
}

// File is a parsed manifest file: Kubernetes objects and at most one
// Scenario document.
type File struct {
	Name     string
	Scenario *Scenario
	Objects  []Object
	// Warnings are what LoadObjects found that the API server takes but
	// that cannot work as the file's author likely expects, each a
	// *manifest.Error at its document and field.
	Warnings []error
	doc      manifest.Document // the Scenario document
}

// supported lists the object kinds a lab runs, by apiVersion/kind.
var supported = map[string]bool{
	"v1/Namespace":                      true,
	"v1/Service":                        true,
	"apps/v1/Deployment":                true,
	"apps/v1/StatefulSet":               true,
	"discovery.k8s.io/v1/EndpointSlice": true,
}

// ErrNotFound is returned by Open and OpenObjects for a path that is
// neither a file nor a built-in.
var ErrNotFound = errors.New("no such file or built-in")

// Open reads a scenario from path (see ReadFile), or a built-in scenario
// by name when no such file exists and the name is a built-in's, and
// returns its plan; see Load. Reading ends when ctx does.
func Open(ctx context.Context, path string) (*plan.Plan, error) {
	name, data, err := read(ctx, path)
	if err != nil {
		return nil, err
	}
	return Load(name, data)
}

// OpenObjects reads manifests for a long-running lab from path or a
// built-in by name; see LoadObjects. Reading ends when ctx does.
func OpenObjects(ctx context.Context, path string) (*File, error) {
	name, data, err := read(ctx, path)
	if err != nil {
		return nil, err
	}
	return LoadObjects(name, data)
}

func read(ctx context.Context, path string) (name string, data []byte, err error) {
	data, err = ReadFile(ctx, path)
	if errors.Is(err, os.ErrNotExist) {
		if b, ok := scenarios.Get(path); ok {
			return "builtin:" + path, b, nil
		}
		return "", nil, fmt.Errorf("scenario: %s: %w (built-in scenarios: %s; lab manifests: %s)", path, ErrNotFound,
			strings.Join(scenarios.Names(), ", "), strings.Join(labManifests(), ", "))
	}
	if err != nil {
		return "", nil, fmt.Errorf("scenario: %w", err)
	}
	return path, data, nil
}

// labManifests lists the built-ins that are manifests for lab up only.
func labManifests() []string {
	var out []string
	for _, m := range scenarios.Manifests() {
		if !slices.Contains(scenarios.Names(), m) {
			out = append(out, m)
		}
	}
	return out
}

// Load parses and checks a scenario file (Kubernetes objects plus exactly
// one Scenario document, all strictly decoded) and resolves it into a
// plan: every reference the scenario makes is looked up, every default
// applied and every variant's overlays and patches applied and checked as
// the API server and the lab would check them, so that a run cannot fail
// on its input after it started. Errors are *manifest.Error, at the line
// of the field.
func Load(name string, data []byte) (*plan.Plan, error) {
	f, err := parse(name, data)
	if err != nil {
		return nil, err
	}
	if f.Scenario == nil {
		return nil, &manifest.Error{File: name, Err: fmt.Errorf("no Scenario document; add one with apiVersion: %s and kind: %s", APIVersion, Kind)}
	}
	if err := checkObjects(f.Objects); err != nil {
		return nil, err
	}
	if err := objects(f.Objects).checkProbes(); err != nil {
		return nil, err
	}
	if err := noFixedClusterIPs(f.Objects); err != nil {
		return nil, err
	}
	return newPlanner(f).plan()
}

// LoadObjects parses and checks Kubernetes objects for a lab that runs
// until stopped (pinlab lab up), which applies them as kubectl apply does:
// what the API server would reject, or the lab cannot run, is an error;
// what it takes but would spoil a scenario run (a Service that selects no
// pods, an EndpointSlice before or without its Service) is in
// File.Warnings. A Scenario document may be present: it is not run, but
// it is checked as Load checks it, and what Load refuses in it is an error
// here too (a file lab up starts is one lab run takes).
func LoadObjects(name string, data []byte) (*File, error) {
	f, err := parse(name, data)
	if err != nil {
		return nil, err
	}
	if err := f.scenarioError(data); err != nil {
		return nil, err
	}
	c := &check{objs: f.Objects, lenient: true}
	if err := c.all(); err != nil {
		return nil, err
	}
	f.Warnings = c.warnings
	if err := checkOneRange(f.Objects); err != nil {
		return nil, err
	}
	return f, nil
}

// scenarioError is what Load refuses in f's Scenario document (nil
// without one): Load's errors at that document. Errors Load finds in the
// objects are LoadObjects's own to judge, more leniently.
func (f *File) scenarioError(data []byte) error {
	if f.Scenario == nil {
		return nil
	}
	_, err := Load(f.Name, data)
	var me *manifest.Error
	if errors.As(err, &me) && me.Doc == f.doc.Index {
		return err
	}
	return nil
}

// parse decodes every document of a file, refusing a file beyond
// MaxFileSize, MaxObjects or MaxValues.
func parse(name string, data []byte) (*File, error) {
	if len(data) > MaxFileSize {
		return nil, &manifest.Error{File: name, Err: tooLarge(int64(len(data)))}
	}
	// One document more than MaxObjects: the Scenario.
	docs, err := manifest.ParseLimited(name, data, manifest.Limits{Documents: MaxObjects + 1, Values: MaxValues})
	if err != nil {
		if d, ok := objectPastLimit(docs); ok {
			return nil, &manifest.Error{File: d.File, Line: d.Line, Doc: d.Index, Err: tooManyObjects}
		}
		return nil, explainLimit(err)
	}
	if d, ok := objectPastLimit(docs); ok {
		return nil, &manifest.Error{File: d.File, Line: d.Line, Doc: d.Index, Err: tooManyObjects}
	}
	f := &File{Name: name}
	for _, d := range docs {
		if isScenario(d) {
			if err := f.setScenario(d); err != nil {
				return nil, err
			}
			continue
		}
		if !supported[d.APIVersion+"/"+d.Kind] {
			return nil, d.Errorf("kind", "%s %s is not supported by the lab; expected Namespace or Service (v1), Deployment or StatefulSet (apps/v1), EndpointSlice (discovery.k8s.io/v1) or Scenario (%s)",
				d.APIVersion, d.Kind, APIVersion)
		}
		obj, err := d.Object()
		if err != nil {
			return nil, err
		}
		f.Objects = append(f.Objects, Object{Doc: d, Obj: obj})
	}
	return f, nil
}

// tooManyObjects says why a lab takes at most MaxObjects.
var tooManyObjects = fmt.Errorf("more than %d objects; a lab runs at most %d (as many as its pods), so split the file", MaxObjects, MaxObjects)

// objectPastLimit returns the first object beyond MaxObjects in docs.
func objectPastLimit(docs []manifest.Document) (manifest.Document, bool) {
	n := 0
	for _, d := range docs {
		if isScenario(d) {
			continue
		}
		if n++; n > MaxObjects {
			return d, true
		}
	}
	return manifest.Document{}, false
}

func isScenario(d manifest.Document) bool {
	return d.Kind == Kind && strings.HasPrefix(d.APIVersion, "pinlab.dev/")
}

// explainLimit rewords a manifest limit error in the lab's terms.
func explainLimit(err error) error {
	var me *manifest.Error
	if !errors.As(err, &me) {
		return err
	}
	switch {
	case errors.Is(err, manifest.ErrTooManyDocuments):
		me.Err = tooManyObjects
	case errors.Is(err, manifest.ErrTooManyValues):
		me.Err = fmt.Errorf("%w; %d objects (a lab's most) of 100 values each would fit twice over, so split the file", me.Err, MaxObjects)
	}
	return err
}

func (f *File) setScenario(d manifest.Document) error {
	if d.APIVersion != APIVersion {
		return d.Errorf("apiVersion", "%q is not served; expected %s", d.APIVersion, APIVersion)
	}
	if f.Scenario != nil {
		return d.Errorf("", "a second Scenario document; a file holds exactly one (the first is document %d)", f.doc.Index)
	}
	s := new(Scenario)
	if err := d.Decode(s); err != nil {
		return err
	}
	f.Scenario, f.doc = s, d
	return nil
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}
