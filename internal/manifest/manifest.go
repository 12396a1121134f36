// Package manifest reads multi-document Kubernetes YAML the way kubectl does
// (sigs.k8s.io/yaml conversion, strict field checking with sigs.k8s.io/json,
// the client-go scheme for kinds) while keeping every document's position, so
// that every error names the file, the line, the document, the field and what
// was expected there.
package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	sjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// Document is one YAML document of a file.
type Document struct {
	File  string
	Index int // 1-based position in the file
	Line  int // line of the document's first content
	// APIVersion, Kind, Name and Namespace are read from the document.
	APIVersion, Kind, Name, Namespace string

	node *yaml.Node
	json []byte
}

// Error is a problem with one place in a manifest file.
type Error struct {
	File  string
	Line  int    // 0 when unknown
	Doc   int    // 1-based document index; 0 when the file as a whole is bad
	What  string // e.g. `Deployment "pricing"`
	Field string // JSON path such as spec.replicas; empty for the document
	Err   error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Doc > 0 {
		fmt.Fprintf(&b, "document %d", e.Doc)
		if e.What != "" {
			fmt.Fprintf(&b, " (%s)", e.What)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Parse splits data into documents and reads each one's type and name.
// Empty documents are skipped. Syntax errors and duplicate keys are errors.
// It reads any number of documents; see ParseLimited.
func Parse(file string, data []byte) ([]Document, error) {
	return ParseLimited(file, data, Limits{})
}

// Limits bound the work ParseLimited does for one file, so that a file
// cannot make it take unbounded time or memory. A zero field means no
// limit.
type Limits struct {
	// Documents is the most non-empty documents the file may hold.
	Documents int
	// Values is the most YAML values the file may hold: every scalar,
	// list, mapping and document (empty ones too) counts one. Each costs
	// time and memory on its way to a typed object (YAML tree, YAML text,
	// JSON); a flow list of 500,000 numbers (1 MiB) took 2.8 s and 1 GB
	// of allocations.
	Values int
}

// Errors wrapped by ParseLimited for a file beyond its Limits.
var (
	ErrTooManyDocuments = errors.New("too many documents")
	ErrTooManyValues    = errors.New("too many YAML values")
)

// ParseLimited is Parse, refusing a file beyond lim with an *Error at the
// document where the limit was passed, wrapping ErrTooManyDocuments or
// ErrTooManyValues, and the documents before it. It counts each
// document's values as soon as YAML has parsed it, before the costlier
// conversions.
func ParseLimited(file string, data []byte, lim Limits) ([]Document, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []Document
	values := 0
	for i := 1; ; i++ {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			line, msg := syntaxError(data, err)
			return nil, &Error{File: file, Line: line, Doc: i, Err: errors.New(msg)}
		}
		if values += countNodes(&node); lim.Values > 0 && values > lim.Values {
			return docs, &Error{File: file, Line: max(node.Line, 1), Doc: i,
				Err: fmt.Errorf("%w: more than %d in the file (scalars, lists, mappings and documents)", ErrTooManyValues, lim.Values)}
		}
		if len(node.Content) == 0 || isNull(node.Content[0]) {
			continue
		}
		if lim.Documents > 0 && len(docs) == lim.Documents {
			return docs, &Error{File: file, Line: node.Content[0].Line, Doc: i,
				Err: fmt.Errorf("%w: more than %d in the file", ErrTooManyDocuments, lim.Documents)}
		}
		if err := duplicateKeys(node.Content[0]); err != nil {
			return nil, &Error{File: file, Line: err.line, Doc: i, Err: err}
		}
		d, err := newDocument(file, i, &node)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
}

// countNodes counts n and the nodes under it; an alias counts one (its
// anchor is counted where it stands).
func countNodes(n *yaml.Node) int {
	c := 1
	if n.Kind != yaml.AliasNode {
		for _, k := range n.Content {
			c += countNodes(k)
		}
	}
	return c
}

func newDocument(file string, index int, node *yaml.Node) (Document, error) {
	root := node.Content[0]
	d := Document{File: file, Index: index, Line: root.Line, node: root}
	if root.Kind != yaml.MappingNode {
		return d, d.Errorf("", "a document must be a mapping with apiVersion and kind, found a %s", kindName(root.Kind))
	}
	if path, n, ok := nonFinite(root); ok {
		d.Kind, d.Name = scalarAt(root, "kind"), scalarAt(root, "metadata.name")
		return d, d.Errorf(path, "%s is not a finite number, and JSON has no form for it (kubectl and the API server refuse it too); expected a finite number", n.Value)
	}
	raw, err := yaml.Marshal(root)
	if err != nil {
		return d, d.Errorf("", "%v", err)
	}
	if d.json, err = sigsyaml.YAMLToJSON(raw); err != nil {
		return d, d.Errorf("", "%v", err)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(d.json, &head); err != nil {
		return d, d.Errorf("", "reading apiVersion, kind and metadata: %v", err)
	}
	d.APIVersion, d.Kind, d.Name, d.Namespace = head.APIVersion, head.Kind, head.Metadata.Name, head.Metadata.Namespace
	if d.Kind == "" {
		return d, d.Errorf("kind", "missing; expected a kind such as Deployment, Service or Scenario")
	}
	if d.APIVersion == "" {
		return d, d.Errorf("apiVersion", "missing; expected e.g. v1, apps/v1 or pinlab.dev/v1alpha1")
	}
	return d, nil
}

// nonFinite finds the first value under n that YAML reads as a float that
// is NaN or infinite (.nan, .inf, -.Inf), which JSON cannot carry, and
// returns its JSON path. Aliases are not followed: their anchors are
// walked where they stand.
func nonFinite(n *yaml.Node) (string, *yaml.Node, bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		var f float64
		if n.ShortTag() == "!!float" && n.Decode(&f) == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return "", n, true
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if p, v, ok := nonFinite(c); ok {
				return join(fmt.Sprintf("[%d]", i), p), v, true
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if p, v, ok := nonFinite(n.Content[i+1]); ok {
				return join(n.Content[i].Value, p), v, true
			}
		}
	}
	return "", nil, false
}

// scalarAt returns the scalar value at path (fields only) under n, or "".
func scalarAt(n *yaml.Node, path string) string {
	for _, f := range strings.Split(path, ".") {
		n, _ = child(n, segment{field: f, index: -1})
	}
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// dupError is a mapping key given twice.
type dupError struct {
	key        string
	line, prev int
}

func (e *dupError) Error() string {
	return fmt.Sprintf("mapping key %q already defined at line %d", e.key, e.prev)
}

// duplicateKeys finds the first key given twice in any mapping under n;
// YAML forbids it and kubectl rejects it.
func duplicateKeys(n *yaml.Node) *dupError {
	if n.Kind == yaml.MappingNode {
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if prev, ok := seen[k.Value]; ok {
				return &dupError{key: k.Value, line: k.Line, prev: prev}
			}
			seen[k.Value] = k.Line
		}
	}
	for _, c := range n.Content {
		if err := duplicateKeys(c); err != nil {
			return err
		}
	}
	return nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "scalar"
	case yaml.AliasNode:
		return "alias"
	}
	return "mapping"
}

// What describes the document for messages: `Deployment "pricing"`.
func (d Document) What() string {
	if d.Name == "" {
		return d.Kind
	}
	return fmt.Sprintf("%s %q", d.Kind, d.Name)
}

// GroupVersionKind returns the document's type.
func (d Document) GroupVersionKind() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(d.APIVersion, d.Kind)
}

// Errorf returns an *Error at the line of the JSON path field (e.g.
// "spec.clients[0].rate"; empty for the document itself).
func (d Document) Errorf(field, format string, args ...any) error {
	return &Error{File: d.File, Line: d.LineOf(field), Doc: d.Index, What: d.What(), Field: field, Err: fmt.Errorf(format, args...)}
}

var typeErrRE = regexp.MustCompile(`cannot unmarshal (\w+(?: \S+)?) into Go struct field \w+\.(\S+) of type`)

// stripGoNames drops the Go names of embedded structs that decoders put in
// paths ("readinessProbe.ProbeHandler.exec"); JSON names never start with
// an upper-case letter in these APIs.
func stripGoNames(path string) string {
	parts := strings.Split(path, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && p[0] >= 'A' && p[0] <= 'Z' {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ".")
}

var quotedRE = regexp.MustCompile(`"([^"]*)"`)

// Decode strictly decodes the document into v (a pointer to a Go type with
// JSON tags): unknown and duplicate fields are errors, and each error says
// which fields exist where the unknown one was found.
func (d Document) Decode(v any) error { return d.DecodeAt("", d.json, v) }

// DecodeAt strictly decodes data, a JSON value built from the document's
// value at path (a variant's overlay merged onto a client group, say),
// into v; errors are placed at path plus the field's path inside data, or
// at the deepest part of that which the document has.
func (d Document) DecodeAt(path string, data []byte, v any) error {
	strict, err := sjson.UnmarshalStrict(data, v, sjson.DisallowDuplicateFields, sjson.DisallowUnknownFields)
	if err != nil {
		return d.typeError(err, v, path)
	}
	if len(strict) > 0 {
		return d.strictError(strict[0], v, path)
	}
	return nil
}

// Has reports whether the document has a value at path (list indexes
// given).
func (d Document) Has(path string) bool { return d.nodeAt(path) != nil }

// Raw returns the JSON of the value at path (list indexes given); null when
// there is none.
func (d Document) Raw(path string) (json.RawMessage, error) {
	var v json.RawMessage
	if err := jsonAt(d.json, path, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// join joins a JSON path prefix and a path inside it.
func join(prefix, path string) string {
	switch {
	case prefix == "":
		return path
	case path == "" || strings.HasPrefix(path, "["):
		return prefix + path
	}
	return prefix + "." + path
}

// Object decodes a Kubernetes kind known to client-go's scheme.
func (d Document) Object() (runtime.Object, error) {
	gvk := d.GroupVersionKind()
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, d.Errorf("kind", "%s is not a kind of %s known to the lab", d.Kind, d.APIVersion)
	}
	if err := d.Decode(obj); err != nil {
		return nil, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, nil
}

func (d Document) strictError(err error, v any, prefix string) error {
	msg := err.Error()
	const unknown, dup = `unknown field "`, `duplicate field "`
	switch {
	case strings.HasPrefix(msg, unknown):
		path := strings.TrimSuffix(strings.TrimPrefix(msg, unknown), `"`)
		full := join(prefix, path)
		return &Error{File: d.File, Line: d.LineOf(full), Doc: d.Index, What: d.What(), Field: full,
			Err: errors.New("unknown field; " + expectedFields(v, path))}
	case strings.HasPrefix(msg, dup):
		path := join(prefix, strings.TrimSuffix(strings.TrimPrefix(msg, dup), `"`))
		return &Error{File: d.File, Line: d.LineOf(path), Doc: d.Index, What: d.What(), Field: path, Err: errors.New("field given twice")}
	}
	return d.Errorf(prefix, "%v", err)
}

func (d Document) typeError(err error, v any, prefix string) error {
	// encoding/json's UnmarshalTypeError, as sigs.k8s.io/json words it:
	// "json: cannot unmarshal string into Go struct field ServicePort.spec.ports.port of type int32"
	if m := typeErrRE.FindStringSubmatch(err.Error()); m != nil {
		jsonPath := stripGoNames(m[2])
		line, path := d.locate(join(prefix, jsonPath))
		if prefix == "" {
			if e := d.mapValueError(v, path, jsonPath); e != nil {
				return e
			}
		}
		msg := fmt.Sprintf("cannot use %s here; expected %s", jsonKind(m[1]), goTypeAt(v, jsonPath))
		if strings.HasPrefix(m[1], "number") {
			if r := d.intRange(v, path, jsonPath); r != "" {
				msg = r
			}
		}
		return &Error{File: d.File, Line: line, Doc: d.Index, What: d.What(), Field: path, Err: errors.New(msg)}
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	// Errors from a field's own decoder (e.g. metav1.Duration's
	// `time: invalid duration "ten"`) carry no path; find the value.
	for _, m := range quotedRE.FindAllStringSubmatch(msg, -1) {
		if path, line, ok := d.findValue(m[1]); ok {
			if rel, ok := strings.CutPrefix(path, prefix); ok {
				if _, known := typeAt(v, strings.TrimPrefix(rel, ".")); known {
					msg += "; expected " + goTypeAt(v, strings.TrimPrefix(rel, "."))
				}
			}
			return &Error{File: d.File, Line: line, Doc: d.Index, What: d.What(), Field: path, Err: errors.New(msg)}
		}
	}
	return d.Errorf(prefix, "%v", msg)
}

// intRange explains a number the decoder refused for an integer field at
// path (list indexes given; jsonPath without): an integer beyond the
// field's range, or a number with a fraction. "" when it is neither.
func (d Document) intRange(v any, path, jsonPath string) string {
	t, ok := typeAt(v, jsonPath)
	if !ok {
		return ""
	}
	var lo, hi *big.Int
	switch t = deref(t); t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := uint(t.Bits())
		hi = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), bits-1), big.NewInt(1))
		lo = new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), bits-1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		hi = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(t.Bits())), big.NewInt(1))
		lo = big.NewInt(0)
	default:
		return ""
	}
	n := d.nodeAt(path)
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	if x, ok := new(big.Int).SetString(n.Value, 10); ok {
		if x.Cmp(lo) < 0 || x.Cmp(hi) > 0 {
			return fmt.Sprintf("%s is out of range; expected an integer from %s to %s", n.Value, lo, hi)
		}
		return ""
	}
	if _, ok := new(big.Float).SetString(n.Value); ok {
		return fmt.Sprintf("%s is not a whole number; expected an integer", n.Value)
	}
	return ""
}

// jsonKind names a JSON value kind from a decoder error in user terms.
func jsonKind(k string) string {
	switch k {
	case "array":
		return "a list"
	case "object":
		return "a mapping"
	case "number":
		return "a number"
	}
	return "a " + k
}

// mapValueError reports the first value of the mapping at path (with list
// indexes; jsonPath without) that is not of the map's value type, e.g.
// metadata.labels.x: 1 where labels take strings. The decoder names only
// the map; nil if path is not a map or every value fits.
func (d Document) mapValueError(v any, path, jsonPath string) error {
	t, ok := typeAt(v, jsonPath)
	if !ok || t.Kind() != reflect.Map || deref(t.Elem()).Kind() != reflect.String {
		return nil
	}
	node := d.nodeAt(path)
	var values map[string]any
	if node == nil || node.Kind != yaml.MappingNode || jsonAt(d.json, path, &values) != nil {
		return nil
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, val := node.Content[i], node.Content[i+1]
		got, ok := values[k.Value]
		if _, isString := got.(string); !ok || isString {
			continue
		}
		msg := fmt.Sprintf("cannot use %s here; expected a string", jsonValueKind(got))
		if val.Kind == yaml.ScalarNode {
			msg += fmt.Sprintf(" (quote it: %q)", val.Value)
		}
		return &Error{File: d.File, Line: val.Line, Doc: d.Index, What: d.What(), Field: path + "." + k.Value, Err: errors.New(msg)}
	}
	return nil
}

func jsonValueKind(v any) string {
	switch v.(type) {
	case bool:
		return "a bool"
	case float64, json.Number:
		return "a number"
	case nil:
		return "null"
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return "another type"
}
