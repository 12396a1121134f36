// Package layout holds the tests that keep the repository's documents true
// to the repository: the layout tree in CONTRIBUTING.md names every
// directory that holds a Go package, and only directories that exist; every
// relative link in README.md, CONTRIBUTING.md and docs/*.md reaches a file
// (and a heading, when it names one); the import graph keeps its rules
// (imports_test.go); and none of those documents, nor the
// built-in scenarios, speaks of the internal claim ids and source lessons
// the lab was built from (they stay in tests and NOTES.md).
//
// It has no code of its own, as package kubetier holds only a tier's tests:
// the checks read files of the whole repository, so they belong to no
// other package. Run them with `go test ./internal/layout`; a failure
// prints the lines to add to or remove from CONTRIBUTING.md.
package layout
