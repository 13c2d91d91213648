package reconf

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// compiler turns source bytes into a candidate: strict decode, environment
// overrides, explicit overrides, defaults, Normalize, secret resolution and
// validation, in that order. Precedence is therefore
// defaults < file < environment < explicit overrides: a default fills only a
// field still zero after the other three.
type compiler[T any] struct {
	baseDir    string // relative file fields are resolved against it
	lookupEnv  func(string) (string, bool)
	overrides  []func(*T)
	propagated bool // literal secrets are refused (cluster mode)
}

// candidate is a compiled configuration with its canonical encoding.
type candidate[T any] struct {
	cfg       *T
	files     map[string]string // file field path -> content digest
	fileClass map[string]Class
	data      []byte // the local source bytes it was compiled from
}

// compile returns a candidate or an *Error. It never returns an error that
// quotes data.
func (c *compiler[T]) compile(data []byte) (*candidate[T], error) {
	return c.compileWith(data, nil)
}

// compileWith compiles data and, when live is given, replaces every live
// field with the one encoded in live (a cluster record): the local source
// keeps authority over bootstrap fields, the cluster over live ones.
func (c *compiler[T]) compileWith(data, live []byte) (cand *candidate[T], err error) {
	defer func() {
		if p := recover(); p != nil {
			cand, err = nil, &Error{Reason: ReasonInternal, Message: "compiling the candidate panicked", Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	cfg := new(T)
	if err := decodeStrict(data, cfg); err != nil {
		return nil, err
	}
	src := data
	if live != nil {
		zeroLive(reflect.ValueOf(cfg).Elem(), Unclassified)
		if err := decodeStrict(live, cfg); err != nil {
			return nil, err
		}
		src = live
	}
	w, err := c.finish(src, cfg)
	if err != nil {
		return nil, err
	}
	return &candidate[T]{cfg: cfg, files: w.files, fileClass: w.fileClass, data: data}, nil
}

// finish runs every step after decoding. The walker it returns holds the
// digests of the files that file fields name.
func (c *compiler[T]) finish(data []byte, cfg *T) (*valueWalker, error) {
	lookup := c.lookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	root := reflect.ValueOf(cfg).Elem()
	var probs []Problem
	if err := applyEnv(root, "", lookup); err != nil {
		return nil, err
	}
	for _, o := range c.overrides {
		o(cfg)
	}
	w := &valueWalker{lookupEnv: lookup, propagated: c.propagated, baseDir: c.baseDir}
	w.prepare(root, "", Unclassified)
	if len(w.derived) > 0 {
		return nil, locateAll(data, &Error{Reason: ReasonDerivedSet, Message: "a derived field is computed and must not be set in the source; remove it", Problems: w.derived})
	}
	if len(w.literal) > 0 {
		return nil, locateAll(data, &Error{Reason: ReasonSecretNotPropagate, Message: "a literal secret cannot be propagated to other workers; write it as ${env:NAME} or ${file:/abs/path} and provide the value on every host", Problems: w.literal})
	}
	if len(w.secrets) > 0 {
		return nil, locateAll(data, &Error{Reason: ReasonSecretUnresolved, Message: "a secret reference cannot be resolved on this host; set the variable or create the file", Problems: w.secrets})
	}
	if n, ok := any(cfg).(Normalizer); ok {
		n.Normalize()
	}
	probs = append(probs, w.check(root, "")...)
	if len(probs) > 0 {
		return nil, locateAll(data, &Error{Reason: ReasonValidation, Message: "the configuration is not valid; fix the fields listed", Problems: probs})
	}
	return w, nil
}

// fileDigest digests a file a file field names. A file that cannot be read
// gets a marker instead: whether that is fatal is the consumer's decision
// (it reads the file in Prepare), and a later successful read is a change.
func fileDigest(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "unreadable"
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// locateAll adds line and column to every problem that has a path.
func locateAll(data []byte, e *Error) *Error {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return e
	}
	idx := indexNodes(&root)
	for i := range e.Problems {
		p := &e.Problems[i]
		if p.Line == 0 && p.Path != "" {
			p.Line, p.Column = idx.locate(p.Path)
		}
	}
	return e
}

// applyEnv sets fields tagged `env:"NAME"` from the environment. It walks
// structs (and pointers to them) but not lists or maps, whose elements have
// no fixed name.
func applyEnv(v reflect.Value, path string, lookup func(string) (string, bool)) error {
	si := structOf(v.Type())
	for _, f := range si.fields {
		fv := v.Field(f.index)
		p := path
		if !f.inline {
			p = joinPath(path, f.name)
		}
		if f.env != "" {
			s, ok := lookup(f.env)
			if !ok {
				continue
			}
			val, err := parseScalar(f.typ, s)
			if err != nil {
				return &Error{Reason: ReasonFieldType, Message: fmt.Sprintf("environment variable %s does not fit its field", f.env), Problems: []Problem{{Path: p, Detail: err.Error()}}}
			}
			if f.typ == secretType {
				// A secret from the environment is a reference to it, so it
				// is resolved (and propagated) like ${env:NAME}.
				val = reflect.ValueOf(Secret{&secretBox{ref: "${env:" + f.env + "}", kind: "env", target: f.env}})
			}
			fv.Set(val)
			continue
		}
		t := f.typ
		if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct && !isLeafType(t.Elem()) {
			if fv.IsNil() {
				continue
			}
			if err := applyEnv(fv.Elem(), p, lookup); err != nil {
				return err
			}
		} else if t.Kind() == reflect.Struct && !isLeafType(t) {
			if err := applyEnv(fv, p, lookup); err != nil {
				return err
			}
		}
	}
	return nil
}

// valueWalker walks a candidate's values.
type valueWalker struct {
	files      map[string]string // path of each file field -> content digest
	fileClass  map[string]Class
	baseDir    string
	lookupEnv  func(string) (string, bool)
	propagated bool
	derived    []Problem
	secrets    []Problem
	literal    []Problem
}

// prepare fills defaults, resolves secrets and refuses set derived fields.
func (w *valueWalker) prepare(v reflect.Value, path string, class Class) {
	switch {
	case v.Type() == secretType:
		s := v.Interface().(Secret)
		if w.propagated && s.IsLiteral() {
			w.literal = append(w.literal, Problem{Path: path, Detail: "literal secret"})
			return
		}
		r, err := s.resolve(w.lookupEnv)
		if err != nil {
			w.secrets = append(w.secrets, Problem{Path: path, Detail: err.Error()})
			return
		}
		v.Set(reflect.ValueOf(r))
	case isLeafType(v.Type()):
	case v.Kind() == reflect.Pointer:
		if !v.IsNil() {
			w.prepare(v.Elem(), path, class)
		}
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
		for i := range v.Len() {
			w.prepare(v.Index(i), elemPath(path, v, i), class)
		}
	case v.Kind() == reflect.Map:
		if v.Len() == 0 || !needsPrepare(v.Type().Elem()) {
			return
		}
		it := v.MapRange()
		for it.Next() {
			// Map values are not addressable: work on a copy, store it back.
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			w.prepare(e, path+"["+safeSegment(mapKey(it.Key()))+"]", class)
			v.SetMapIndex(it.Key(), e)
		}
	case v.Kind() == reflect.Struct:
		for _, f := range structOf(v.Type()).fields {
			fv := v.Field(f.index)
			c := class
			if f.class != Unclassified {
				c = f.class
			}
			p := path
			if !f.inline {
				p = joinPath(path, f.name)
			}
			if c == Derived && f.class == Derived && !fv.IsZero() {
				w.derived = append(w.derived, Problem{Path: p, Detail: "derived field is set"})
				continue
			}
			if f.hasDef && fv.IsZero() {
				d, _ := parseScalar(f.typ, f.def) // checked when the type was first seen
				fv.Set(d)
			}
			if f.isFile && fv.String() != "" {
				if w.files == nil {
					w.files, w.fileClass = map[string]string{}, map[string]Class{}
				}
				name := fv.String()
				if !filepath.IsAbs(name) && w.baseDir != "" {
					name = filepath.Join(w.baseDir, name)
				}
				w.files[p], w.fileClass[p] = fileDigest(name), c
			}
			w.prepare(fv, p, c)
		}
	}
}

// needsPrepare reports whether values of t can hold defaults or secrets.
func needsPrepare(t reflect.Type) bool {
	return !isLeafType(t) || t == secretType
}

// check applies validate rules, keyed-list uniqueness and Validate methods.
func (w *valueWalker) check(v reflect.Value, path string) []Problem {
	var out []Problem
	switch {
	case isLeafType(v.Type()):
	case v.Kind() == reflect.Pointer:
		if !v.IsNil() {
			out = append(out, w.check(v.Elem(), path)...)
		}
	case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
		if kf := listKey(v.Type()); kf >= 0 {
			seen := map[string]bool{}
			for i := range v.Len() {
				k := keyOf(v.Index(i), kf)
				if k == "" {
					continue
				}
				if seen[k] {
					out = append(out, Problem{Path: path + "[" + safeSegment(k) + "]", Detail: "duplicate name in list"})
				}
				seen[k] = true
			}
		}
		for i := range v.Len() {
			out = append(out, w.check(v.Index(i), elemPath(path, v, i))...)
		}
	case v.Kind() == reflect.Map:
		if !needsPrepare(v.Type().Elem()) {
			return out // leaf values carry no rules of their own
		}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(mapKey(a), mapKey(b)) })
		for _, k := range keys {
			out = append(out, w.check(v.MapIndex(k), path+"["+safeSegment(mapKey(k))+"]")...)
		}
	case v.Kind() == reflect.Struct:
		for _, f := range structOf(v.Type()).fields {
			fv := v.Field(f.index)
			p := path
			if !f.inline {
				p = joinPath(path, f.name)
			}
			for _, r := range f.rules {
				if msg := r.check(fv); msg != "" {
					out = append(out, Problem{Path: p, Detail: msg})
				}
			}
			out = append(out, w.check(fv, p)...)
		}
		if v.CanAddr() {
			if val, ok := v.Addr().Interface().(Validator); ok {
				out = append(out, validatorProblems(val, path)...)
			}
		} else if val, ok := v.Interface().(Validator); ok {
			out = append(out, validatorProblems(val, path)...)
		}
	}
	return out
}

// validatorProblems runs a Validate method; field paths it reports are
// relative to the struct it was called on.
func validatorProblems(val Validator, path string) (out []Problem) {
	defer func() {
		if p := recover(); p != nil {
			out = []Problem{{Path: path, Detail: "Validate panicked"}}
		}
	}()
	err := val.Validate()
	if err == nil {
		return nil
	}
	collectProblems(err, path, &out)
	return out
}

// collectProblems flattens joined errors; a *FieldError keeps its path.
func collectProblems(err error, path string, out *[]Problem) {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			collectProblems(e, path, out)
		}
		return
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		*out = append(*out, Problem{Path: joinPath(path, fe.Path), Detail: fe.Detail})
		return
	}
	*out = append(*out, Problem{Path: path, Detail: err.Error()})
}

// listKey returns the key field index of a list of structs, or -1.
func listKey(t reflect.Type) int {
	if k, ok := listKeys.Load(t); ok {
		return k
	}
	k := -1
	if et := elemStruct(t); et != nil && t.Kind() != reflect.Map {
		k = keyFieldOf(et)
	}
	listKeys.Store(t, k)
	return k
}

var listKeys syncMap[reflect.Type, int]

func keyOf(e reflect.Value, kf int) string {
	if e.Kind() == reflect.Pointer {
		if e.IsNil() {
			return ""
		}
		e = e.Elem()
	}
	return e.Field(kf).String()
}

// elemPath names element i of list v: by its key where the elements have
// one ("backends[stub]"), else by index ("routes[3]").
func elemPath(path string, v reflect.Value, i int) string {
	if kf := listKey(v.Type()); kf >= 0 {
		if k := keyOf(v.Index(i), kf); k != "" {
			return path + "[" + safeSegment(k) + "]"
		}
	}
	return path + "[" + strconv.Itoa(i) + "]"
}
