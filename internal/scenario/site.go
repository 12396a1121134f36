package scenario

import (
	"strings"

	"github.com/pinlab/pinlab/internal/manifest"
)

// site is where a checked value came from in the Scenario document, so
// that errors point at the line that set it. A value can be built from
// several places (a variant's overlay merged onto a client group): paths
// lists their JSON paths, most specific first; an error about a field goes
// to the first path that has the field, else to the last one, prefixed
// with note ("in variant x: ").
type site struct {
	doc   manifest.Document
	paths []string
	note  string
}

// at returns a site at one path of doc.
func at(doc manifest.Document, path string) site { return site{doc: doc, paths: []string{path}} }

// Errorf returns an error at field (relative to the site's paths).
func (s site) Errorf(field, format string, args ...any) error {
	for i, p := range s.paths {
		full := join(p, field)
		if i == len(s.paths)-1 {
			return s.doc.Errorf(full, s.note+format, args...)
		}
		if s.doc.Has(full) {
			return s.doc.Errorf(full, format, args...)
		}
	}
	return s.doc.Errorf(field, format, args...)
}

// first returns the first of fields that the most specific path having
// any of them has: the field an error about them all should point at.
func (s site) first(fields ...string) string {
	for _, p := range s.paths {
		for _, f := range fields {
			if s.doc.Has(join(p, f)) {
				return f
			}
		}
	}
	return fields[0]
}

// child returns the site of a field inside this one.
func (s site) child(field string) site {
	out := site{doc: s.doc, note: s.note}
	for _, p := range s.paths {
		out.paths = append(out.paths, join(p, field))
	}
	return out
}

// join joins a JSON path and a field path inside it.
func join(path, field string) string {
	switch {
	case path == "":
		return field
	case field == "" || strings.HasPrefix(field, "["):
		return path + field
	}
	return path + "." + field
}
