package reconf

import (
	"fmt"
	"reflect"
)

// envWalker sets fields tagged `env:"NAME"` from the environment, over
// the file and the defaults. Env tags name one field each, so they sit
// outside lists and maps (the schema refuses one inside); a field under a
// nil pointer is left alone. The first variable that does not fit its
// field is the error; its value is never quoted.
func applyEnv(root *node, v reflect.Value, lookup func(string) (string, bool)) error {
	var err error
	w := &walker{mask: fEnv, enter: func(w *walker, n *node, v reflect.Value) bool {
		if err != nil {
			return false
		}
		if n.env == "" {
			return n.kind == kStruct || n.kind == kPointer
		}
		s, ok := lookup(n.env)
		if !ok {
			return false
		}
		target := n.shape
		if n.kind == kPointer {
			target = n.elem.shape
		}
		val, perr := parseText(target, s)
		if perr != nil {
			err = &Error{Reason: ReasonFieldType, Message: fmt.Sprintf("environment variable %s does not fit its field", n.env), Problems: []Problem{{Path: w.path(), Detail: perr.Error()}}}
			return false
		}
		if target.kind == kSecret {
			// A secret from the environment is a reference to it, so it
			// is resolved (and propagated) like ${env:NAME}.
			val = reflect.ValueOf(Secret{&secretBox{ref: "${env:" + n.env + "}", kind: "env", target: n.env}})
		}
		if n.kind == kPointer {
			p := reflect.New(target.typ)
			p.Elem().Set(val)
			val = p
		}
		v.Set(val)
		return false
	}}
	w.walk(root, v)
	return err
}
