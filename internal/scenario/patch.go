package scenario

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/pinlab/pinlab/internal/manifest"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// Patch types, as kubectl patch --type names them.
var patchTypes = []string{"strategic", "merge", "json"}

// patchSite is where a variant's patch of one object is in the Scenario
// document.
type patchSite struct {
	doc     manifest.Document
	path    string // ...patches[j].patch
	variant string
}

// locate returns the path in the Scenario document of a field of the
// patched object when the patch wrote it (or an ancestor of it two levels
// deep or more, since lists merge by key and indexes need not match).
func (p *patchSite) locate(field string) (string, bool) {
	segs := strings.Split(field, ".")
	for n := len(segs); n >= min(2, len(segs)) && n > 0; n-- {
		if f := join(p.path, strings.Join(segs[:n], ".")); p.doc.Has(f) {
			return f, true
		}
	}
	return "", false
}

// patch applies a variant's patches (at path.patches) to copies of the
// file's objects and checks the patched objects as the originals are
// checked. It returns the objects and a description of the patches.
func (pl *planner) patch(path, variant string, patches []Patch) (objects, string, error) {
	if len(patches) == 0 {
		return pl.base, "", nil
	}
	objs := pl.base.copy()
	var desc []string
	for j, p := range patches {
		s := at(pl.doc, fmt.Sprintf("%s.patches[%d]", path, j))
		k, err := objs.patchTarget(p.Target)
		if err != nil {
			return nil, "", s.Errorf("target", "%v", err)
		}
		typ := cmp.Or(p.Type, defaultPatchType)
		if !slices.Contains(patchTypes, typ) {
			return nil, "", s.Errorf("type", "%q: expected one of %s", p.Type, strings.Join(patchTypes, ", "))
		}
		if len(p.Patch) == 0 || string(p.Patch) == "null" {
			return nil, "", s.Errorf("patch", "required: the fields to change, e.g. {spec: {replicas: 4}}")
		}
		site := s.paths[0] + ".patch"
		obj, err := pl.applyPatch(objs[k], typ, p.Patch, site)
		if err != nil {
			return nil, "", err
		}
		objs[k].Obj, objs[k].patch = obj, &patchSite{doc: pl.doc, path: site, variant: variant}
		desc = append(desc, fmt.Sprintf("%s %s/%s (%s)", objs[k].Doc.Kind, objs[k].Namespace(), objs[k].Doc.Name, typ))
	}
	if err := checkObjects(objs); err != nil {
		return nil, "", err
	}
	if err := objs.checkProbes(); err != nil {
		return nil, "", err
	}
	return objs, strings.Join(desc, ", "), nil
}

// patchTarget returns the index of the object t names.
func (objs objects) patchTarget(t PatchTarget) (int, error) {
	if t.Kind == "" || t.Name == "" {
		return 0, fmt.Errorf("set kind and name (and namespace when the name is not unique)")
	}
	found := -1
	var same []string
	for i, o := range objs {
		if o.Doc.Kind != t.Kind {
			continue
		}
		same = append(same, o.Namespace()+"/"+o.Doc.Name)
		if o.Doc.Name == t.Name && (t.Namespace == "" || t.Namespace == o.Namespace()) {
			if found >= 0 {
				return 0, fmt.Errorf("a %s %q exists in several namespaces; set namespace", t.Kind, t.Name)
			}
			found = i
		}
	}
	if found < 0 {
		return 0, fmt.Errorf("no %s %q in this file (%ss: %s)", t.Kind, t.Name, t.Kind, listOrNone(same))
	}
	return found, nil
}

// applyPatch returns a patched copy of o's object, strictly decoded: a
// field the patch adds that the kind does not have is an error at site.
func (pl *planner) applyPatch(o Object, typ string, patch json.RawMessage, site string) (runtime.Object, error) {
	orig, err := json.Marshal(o.Obj)
	if err != nil {
		return nil, err
	}
	var modified []byte
	switch typ {
	case "strategic":
		modified, err = strategicpatch.StrategicMergePatch(orig, patch, o.Obj)
	case "merge":
		modified, err = jsonpatch.MergePatch(orig, patch)
	case "json":
		var ops jsonpatch.Patch
		if ops, err = jsonpatch.DecodePatch(patch); err == nil {
			modified, err = ops.Apply(orig)
		}
	}
	if err != nil {
		return nil, pl.doc.Errorf(site, "cannot apply the %s patch to %s: %v", typ, o.Doc.What(), err)
	}
	out := reflect.New(reflect.TypeOf(o.Obj).Elem()).Interface().(runtime.Object)
	if err := pl.doc.DecodeAt(site, modified, out); err != nil {
		return nil, err
	}
	before, _ := asMeta(o.Obj)
	after, _ := asMeta(out)
	if before != after {
		return nil, pl.doc.Errorf(site, "a patch may not change an object's apiVersion, kind, name or namespace (%s became %s)", before, after)
	}
	return out, nil
}

// asMeta returns "apiVersion kind namespace/name" of obj.
func asMeta(obj runtime.Object) (string, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	err = json.Unmarshal(b, &m)
	return fmt.Sprintf("%s %s %s/%s", m.APIVersion, m.Kind, m.Metadata.Namespace, m.Metadata.Name), err
}
