// Package fieldclass lists a configuration type's paths with their field
// classes and checks that every one has a class, for reconfd's
// check-config and for package reconftest. A library user declares
// classes in `reconf` tags and checks them with
// reconftest.RequireClassified, so the listing is not part of package
// reconf's API; package reconf sets Of and Check when it is initialized.
package fieldclass

import (
	"errors"
	"reflect"
)

// ErrUnclassified is wrapped by Check's error when a field has no class.
var ErrUnclassified = errors.New("reconf: field has no class")

// Field is one leaf path of a configuration type with the name of its
// effective class: "live", "restart", "derived" or "unclassified". Paths
// of list and map elements use "[*]".
type Field struct {
	Path  string
	Class string
}

// Of lists every leaf path of the struct type t with its class, sorted by
// path. It panics when t is not a configuration type New would accept.
// Set by package reconf.
var Of func(t reflect.Type) []Field

// Check returns an error wrapping ErrUnclassified that lists every leaf
// field of t with no class of its own or inherited, and any error in t's
// reconf, default, env or validate tags. Set by package reconf.
var Check func(t reflect.Type) error
