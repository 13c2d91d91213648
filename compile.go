package reconf

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"

	"go.yaml.in/yaml/v3"
)

// compiler turns source bytes into a candidate: defaults, strict decode,
// environment overrides, explicit overrides, secret resolution,
// Normalize and validation, in that order. Precedence is therefore
// defaults < file < environment < explicit overrides, and a default fills
// only a field that no layer set (an explicit zero is a value).
type compiler[T any] struct {
	baseDir    string // relative file fields are resolved against it
	lookupEnv  func(string) (string, bool)
	overrides  []func(*T)
	propagated bool           // literal secrets are refused (cluster mode)
	base       *recordBase[T] // the local source decoded, for records (compileRecord)
}

// candidate is a compiled configuration with its canonical encoding.
type candidate[T any] struct {
	cfg       *T
	files     map[string]string // file field path -> content digest
	fileClass map[string]Class
	data      []byte // the local source bytes it was compiled from
}

// compile returns a candidate or an *Error (or ctx's error). It never
// returns an error that quotes data.
func (c *compiler[T]) compile(ctx context.Context, data []byte) (*candidate[T], error) {
	return c.compileWith(ctx, data, nil)
}

// compileWith compiles data and, when live is given, replaces every live
// field with the one encoded in live (a cluster record): the local source
// keeps authority over bootstrap fields, the cluster over live ones.
func (c *compiler[T]) compileWith(ctx context.Context, data, live []byte) (cand *candidate[T], err error) {
	defer func() {
		if p := recover(); p != nil {
			cand, err = nil, &Error{Reason: ReasonInternal, Message: "compiling the candidate panicked", Err: fmt.Errorf("panic: %v", p)}
		}
	}()
	root := mustSchema(reflect.TypeFor[T]())
	cfg := new(T)
	v := reflect.ValueOf(cfg).Elem()
	fillDefaults(root, v)
	doc, err := decodeYAML(ctx, data, root, v)
	if err != nil {
		return nil, err
	}
	if live != nil {
		resetLive(root, v)
		if doc, err = decodeYAML(ctx, live, root, v); err != nil {
			return nil, err
		}
	}
	r, err := c.finish(root, doc, cfg)
	if err != nil {
		return nil, err
	}
	return &candidate[T]{cfg: cfg, files: r.files, fileClass: r.fileClass, data: data}, nil
}

// finish runs every step after decoding. doc is the decoded document,
// used to give problems a line and column.
func (c *compiler[T]) finish(root *node, doc *yaml.Node, cfg *T) (*resolver, error) {
	lookup := c.lookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v := reflect.ValueOf(cfg).Elem()
	if err := applyEnv(root, v, lookup); err != nil {
		return nil, err
	}
	for _, o := range c.overrides {
		o(cfg)
	}
	r := &resolver{lookupEnv: lookup, propagated: c.propagated, baseDir: c.baseDir}
	r.walk(root, v)
	if len(r.literal) > 0 {
		return nil, locateAll(doc, &Error{Reason: ReasonSecretNotPropagate, Message: "a literal secret cannot be propagated to other workers; write it as ${env:NAME} or ${file:/abs/path} and provide the value on every host", Problems: r.literal})
	}
	if len(r.secrets) > 0 {
		return nil, locateAll(doc, &Error{Reason: ReasonSecretUnresolved, Message: "a secret reference cannot be resolved on this host; set the variable or create the file", Problems: r.secrets})
	}
	if n, ok := any(cfg).(Normalizer); ok {
		n.Normalize()
	}
	var ch checker
	ch.walker().walk(root, v)
	if len(ch.probs) > 0 {
		return nil, locateAll(doc, &Error{Reason: ReasonValidation, Message: "the configuration is not valid; fix the fields listed", Problems: ch.probs})
	}
	return r, nil
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

// resolver is the visitor that resolves secret references and digests the
// files that file fields name.
type resolver struct {
	files      map[string]string // path of each file field -> content digest
	fileClass  map[string]Class
	baseDir    string
	lookupEnv  func(string) (string, bool)
	propagated bool
	secrets    []Problem
	literal    []Problem
}

func (r *resolver) walk(root *node, v reflect.Value) {
	w := &walker{mask: fSecret | fFile, mutates: true, enter: r.enter}
	w.walk(root, v)
}

func (r *resolver) enter(w *walker, n *node, v reflect.Value) bool {
	switch {
	case n.kind == kSecret:
		s := v.Interface().(Secret)
		if r.propagated && s.IsLiteral() {
			r.literal = append(r.literal, Problem{Path: w.path(), Detail: "literal secret"})
			return false
		}
		res, err := s.resolve(r.lookupEnv)
		if err != nil {
			r.secrets = append(r.secrets, Problem{Path: w.path(), Detail: err.Error()})
			return false
		}
		v.Set(reflect.ValueOf(res))
	case n.file && v.String() != "":
		if r.files == nil {
			r.files, r.fileClass = map[string]string{}, map[string]Class{}
		}
		name := v.String()
		if !filepath.IsAbs(name) && r.baseDir != "" {
			name = filepath.Join(r.baseDir, name)
		}
		p := w.path()
		r.files[p], r.fileClass[p] = fileDigest(name), n.class
	}
	return true
}
