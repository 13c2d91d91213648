// Package configdiff compares two configurations path by path, the way a
// runtime's attempt does, for reconfd's check of one file against
// another. A library service learns what a candidate changes from
// reconf.Runtime.Check instead, so the comparison is not part of package
// reconf's API; package reconf sets Paths when it is initialized.
package configdiff

// Change is one path that differs between two configurations, with the
// name of the field class that decides whether it may change at run time:
// "live", "restart", "derived" or "unclassified".
type Change struct {
	Path  string
	Class string
}

// Paths returns every path that differs between a and b, two pointers to
// values of one configuration type, sorted. It never reports values.
// Lists whose elements have a key field are compared by key, so a changed
// backend shows as "backends[stub].timeout". It panics when a and b are
// not pointers to one struct type. Set by package reconf.
var Paths func(a, b any) []Change
