package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	yamlv2 "go.yaml.in/yaml/v2"
	"go.yaml.in/yaml/v3"
)

// segment is one step of a JSON path: a field name or a list index.
type segment struct {
	field string
	index int // -1 for fields
}

// splitPath parses "spec.containers[0].image" into segments.
func splitPath(path string) []segment {
	var out []segment
	for _, part := range strings.Split(path, ".") {
		if part == "" {
			continue
		}
		name, rest, _ := strings.Cut(part, "[")
		if name != "" {
			out = append(out, segment{field: name, index: -1})
		}
		for rest != "" {
			num, after, _ := strings.Cut(rest, "]")
			i, err := strconv.Atoi(num)
			if err != nil {
				break
			}
			out = append(out, segment{index: i})
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return out
}

// LineOf returns the line of the value at path in the document, or of the
// deepest part of the path that exists; the document's line for "".
func (d Document) LineOf(path string) int {
	line, _ := d.locate(path)
	return line
}

// locate returns the line of path and the path with list indexes filled in
// where it stepped into a list by field name ("spec.ports.port" becomes
// "spec.ports[0].port"), as decoders that drop indexes report.
func (d Document) locate(path string) (int, string) {
	n := d.node
	line := d.Line
	var full strings.Builder
	for _, s := range splitPath(path) {
		next, idx := child(n, s)
		if next == nil {
			return line, path
		}
		if idx >= 0 && s.index < 0 {
			fmt.Fprintf(&full, "[%d]", idx)
		}
		if s.index >= 0 {
			fmt.Fprintf(&full, "[%d]", s.index)
		} else {
			if full.Len() > 0 {
				full.WriteByte('.')
			}
			full.WriteString(s.field)
		}
		n, line = next, next.Line
	}
	return line, full.String()
}

// nodeAt returns the node of the value at path (list indexes given), or
// nil if there is none.
func (d Document) nodeAt(path string) *yaml.Node {
	n := d.node
	for _, s := range splitPath(path) {
		if n, _ = child(n, s); n == nil {
			return nil
		}
	}
	return n
}

// jsonAt decodes the value at path (list indexes given) of the JSON
// document data into out.
func jsonAt(data []byte, path string, out any) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	for _, s := range splitPath(path) {
		switch x := v.(type) {
		case map[string]any:
			v = x[s.field]
		case []any:
			if s.index < 0 || s.index >= len(x) {
				return fmt.Errorf("no item %d", s.index)
			}
			v = x[s.index]
		default:
			return fmt.Errorf("no field %q", s.field)
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// findScalar returns the path and line of the only scalar value equal to v
// in the document.
func (d Document) findScalar(v string) (string, int, bool) {
	return d.findScalarFunc(func(s string) bool { return s == v })
}

// findScalarFunc returns the path and line of the only scalar value for
// which match is true.
func (d Document) findScalarFunc(match func(string) bool) (string, int, bool) {
	var paths []string
	var lines []int
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.ScalarNode:
			if match(n.Value) {
				paths, lines = append(paths, path), append(lines, n.Line)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i))
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], strings.TrimPrefix(path+"."+n.Content[i].Value, "."))
			}
		}
	}
	walk(d.node, "")
	if len(paths) != 1 {
		return "", 0, false
	}
	return paths[0], lines[0], true
}

// findValue is findScalar, falling back to the only scalar that contains v
// (errors quote parts of values: `unknown unit " seconds"`).
func (d Document) findValue(v string) (string, int, bool) {
	if p, l, ok := d.findScalar(v); ok {
		return p, l, ok
	}
	return d.findScalarFunc(func(s string) bool { return v != "" && strings.Contains(s, v) })
}

// child returns the node for s under n and, when a field step went into a
// list (a path without its index), the index of the item it was found in.
func child(n *yaml.Node, s segment) (*yaml.Node, int) {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil {
		return nil, -1
	}
	switch {
	case n.Kind == yaml.SequenceNode && s.index >= 0:
		if s.index < len(n.Content) {
			return n.Content[s.index], -1
		}
	case n.Kind == yaml.SequenceNode:
		for i, item := range n.Content {
			if c, _ := child(item, s); c != nil {
				return c, i
			}
		}
	case n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == s.field {
				if n.Content[i+1].Kind == yaml.MappingNode || n.Content[i+1].Kind == yaml.SequenceNode {
					// Point at the key for nested values, where the eye looks.
					v := *n.Content[i+1]
					v.Line = n.Content[i].Line
					return &v, -1
				}
				return n.Content[i+1], -1
			}
		}
	}
	return nil, -1
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// parserProblems are the problems yaml's parser (not its scanner) reports.
// For these, yaml.v3 prints the 0-based line of the construct being parsed
// (e.g. where an unclosed { opened), one less than the line it is on, and
// yaml.v2 prints the 0-based line where parsing stopped. Scanner problems
// come with 1-based lines from both.
var parserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %TAG directive":         true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

// syntaxError turns a yaml.v3 syntax error on data into the 1-based line
// to report and a message. Scanner errors keep yaml.v3's line. For parser
// errors the line is where parsing stopped, read from yaml.v2 on the same
// input; an unclosed flow collection is reported at the line it opened on,
// and the message names both lines.
func syntaxError(data []byte, err error) (int, string) {
	line, problem := yamlErrLine(err), cleanYAMLErr(err)
	msg := "YAML does not parse: " + problem
	if strings.Contains(problem, "UTF-8") {
		// The reader's errors carry no line: find the bad bytes.
		return invalidUTF8Line(data), msg
	}
	if !parserProblems[problem] {
		return line, msg
	}
	last := lastContentLine(data)
	context := min(line+1, last)
	if !strings.Contains(err.Error(), "line ") {
		context = 1
	}
	stopped := context
	if l, p, ok := v2ErrLine(data); ok && p == problem {
		stopped = min(l+1, last)
	}
	switch problem {
	case "did not find expected ',' or '}'", "did not find expected ',' or ']'":
		open := problem[len(problem)-2 : len(problem)-1]
		if open == "}" {
			open = "{"
		} else {
			open = "["
		}
		if stopped > context {
			return context, fmt.Sprintf("%s: the %s opened on line %d is not closed (parsing stopped at line %d)", msg, open, context, stopped)
		}
		return context, fmt.Sprintf("%s: a %s is not closed", msg, open)
	case "did not find expected key", "did not find expected '-' indicator":
		msg += " (check the indentation of this line against the lines above)"
	}
	return stopped, msg
}

// invalidUTF8Line is the 1-based line of the first byte of data that is
// not UTF-8 (1 if all is).
func invalidUTF8Line(data []byte) int {
	valid := data
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			valid = data[:i]
			break
		}
		i += n
	}
	return bytes.Count(valid, []byte("\n")) + 1
}

// v2ErrLine parses data with yaml.v2 and returns the line number and
// problem of its first syntax error.
func v2ErrLine(data []byte) (int, string, bool) {
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	for {
		var v any
		err := dec.Decode(&v)
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "line ") {
			return 0, "", false
		}
		return yamlErrLine(err), cleanYAMLErr(err), true
	}
}

// lastContentLine is the 1-based line of the last non-blank character of
// data (1 for blank data): errors at the end of input point there.
func lastContentLine(data []byte) int {
	trimmed := bytes.TrimRight(data, " \t\r\n")
	return bytes.Count(trimmed, []byte("\n")) + 1
}

// yamlErrLine returns the line a YAML syntax error names; yaml.v3 leaves
// out the line when the problem is on the first one.
func yamlErrLine(err error) int {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 1
}

// cleanYAMLErr returns the problem of a YAML error without the prefix
// and line.
func cleanYAMLErr(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = yamlLineRE.ReplaceAllString(s, "")
	return strings.TrimPrefix(strings.TrimSpace(s), ": ")
}

// typeAt follows path's fields through v's Go type (JSON names, inline
// structs, pointers, lists and maps) and returns the type found there.
func typeAt(v any, path string) (reflect.Type, bool) {
	t := reflect.TypeOf(v)
	for _, s := range splitPath(path) {
		t = deref(t)
		if s.index >= 0 || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			if t.Kind() != reflect.Slice && t.Kind() != reflect.Map {
				return nil, false
			}
			t = t.Elem()
			if s.index >= 0 {
				continue
			}
			t = deref(t)
		}
		f, ok := fieldByJSON(t, s.field)
		if !ok {
			return nil, false
		}
		t = f.Type
	}
	return deref(t), true
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// jsonFields returns the JSON field names of struct type t, following
// inline and embedded structs.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	if t.Kind() != reflect.Struct {
		return out
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if (f.Anonymous && name == "") || strings.Contains(opts, "inline") {
			for k, v := range jsonFields(deref(f.Type)) {
				out[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
	return out
}

func fieldByJSON(t reflect.Type, name string) (reflect.StructField, bool) {
	f, ok := jsonFields(t)[name]
	return f, ok
}

// expectedFields says which fields exist where path's last field was not
// found, with a suggestion when one is close.
func expectedFields(v any, path string) string {
	parent, last := "", path
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		parent, last = path[:i], path[i+1:]
	}
	t, ok := typeAt(v, parent)
	if !ok {
		return "no such field here"
	}
	if t.Kind() == reflect.Slice {
		t = deref(t.Elem())
	}
	var names []string
	for n := range jsonFields(t) {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return "no fields are allowed here"
	}
	msg := "expected one of: " + strings.Join(names, ", ")
	if s := closest(last, names); s != "" {
		msg = fmt.Sprintf("did you mean %q? %s", s, msg)
	}
	return msg
}

// goTypeAt names the type expected at path in user terms.
func goTypeAt(v any, path string) string {
	t, ok := typeAt(v, path)
	if !ok {
		return "another type"
	}
	return describe(t)
}

func describe(t reflect.Type) string {
	t = deref(t)
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list of " + plural(describe(t.Elem()))
	case reflect.Map, reflect.Struct:
		if t.Name() == "Duration" {
			return `a duration such as "10s"`
		}
		if t.Name() == "IntOrString" {
			return "a number or a name"
		}
		if t.Name() == "TTL" {
			return `a duration such as "30s", or forever`
		}
		return "a mapping"
	}
	return t.String()
}

// plural turns "a string" into "strings", "an integer" into "integers".
func plural(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "an "), "a ")
	switch {
	case strings.HasPrefix(s, "list of"):
		return "lists"
	case strings.HasPrefix(s, "duration"):
		return "durations"
	case strings.Contains(s, " or "):
		return "values (" + s + ")"
	}
	return s + "s"
}

// closest returns the name within edit distance 2 of s, if one is.
func closest(s string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(strings.ToLower(s), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
