package reconf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/reconfhq/reconf/internal/reasons"
	"go.yaml.in/yaml/v3"
)

// compiler turns source bytes into a candidate: defaults, strict decode,
// environment overrides, explicit overrides, secret resolution,
// Normalize and validation, in that order. Precedence is therefore
// defaults < file < environment < explicit overrides, and a default fills
// only a field that no layer set (an explicit zero is a value).
type compiler[T any] struct {
	baseDir   string // relative file fields are resolved against it
	lookupEnv func(string) (string, bool)
	overrides []func(*T)
	// restart sets the process's restart-class values (restartopt.Restart.Values)
	// on the compiles that pin them: the startup load and every cluster
	// record, never a reload of the file.
	restart    func(*T)
	propagated bool // literal secrets are refused (cluster mode)
	// maxFileBytes bounds each referenced file (secrets, file fields);
	// DefaultMaxSourceBytes when not positive.
	maxFileBytes int64
	base         *recordBase[T] // the local source decoded, for records (compileRecord)
}

// candidate is a compiled configuration with its canonical encoding.
type candidate[T any] struct {
	cfg       *T
	files     map[string]string // file field path -> content digest
	fileClass map[string]fieldClass
	local     map[string]bool // hostfile field paths: digests that stay on this host
	read      *attemptFiles   // the file fields' bytes, handed to Prepare
	data      []byte          // the local source bytes it was compiled from
	live      []byte          // the cluster record's live fields applied on data, if any
	liveJSON  bool            // live is formatJSON, not YAML
	pinned    bool            // compiled with the process's restart values (compiler.restart)
}

// compile returns a candidate or an *Error (or ctx's error). It never
// returns an error that quotes data.
func (c *compiler[T]) compile(ctx context.Context, data []byte) (*candidate[T], error) {
	return c.compileWith(ctx, data, nil, false)
}

// compileWith compiles data and, when live is given, replaces every live
// field with the one encoded in live (a cluster record): the local source
// keeps authority over bootstrap fields, the cluster over live ones. pin
// sets the process's restart values (compiler.restart) over the file's.
func (c *compiler[T]) compileWith(ctx context.Context, data, live []byte, pin bool) (cand *candidate[T], err error) {
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
	pin = pin && c.restart != nil
	r, err := c.finish(ctx, root, doc, cfg, pin)
	if err != nil {
		return nil, err
	}
	return &candidate[T]{cfg: cfg, files: r.files, fileClass: r.fileClass, local: r.local, read: r.read, data: data, live: live, pinned: pin}, nil
}

// finish runs every step after decoding. doc is the decoded document,
// used to give problems a line and column.
func (c *compiler[T]) finish(ctx context.Context, root *node, doc *yaml.Node, cfg *T, pin bool) (*resolver, error) {
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
	if pin {
		if err := c.pinRestart(root, v); err != nil {
			return nil, err
		}
	}
	limit := c.maxFileBytes
	if limit <= 0 {
		limit = DefaultMaxSourceBytes
	}
	r := &resolver{ctx: ctx, lookupEnv: lookup, propagated: c.propagated, baseDir: c.baseDir,
		read: newAttemptFiles(ctx, c.baseDir, limit)}
	r.walk(root, v)
	if r.ctxErr != nil {
		return nil, r.ctxErr
	}
	if len(r.literal) > 0 {
		return nil, locateAll(doc, &Error{Reason: reasons.SecretNotPropagate, Message: "a literal secret cannot be propagated to other workers; write it as ${env:NAME} or ${file:/abs/path} and provide the value on every host", Problems: r.literal})
	}
	if len(r.fileErrs) > 0 {
		// One reason per answer: the first failure's. Every failed file is
		// listed, each with its own cause.
		return nil, locateAll(doc, &Error{Reason: r.fileReason, Message: "a file the configuration references cannot be used; fix the files listed", Problems: r.fileErrs})
	}
	if len(r.secrets) > 0 {
		return nil, locateAll(doc, &Error{Reason: ReasonSecretUnresolved, Message: "a secret reference cannot be resolved on this host; set the variable or create the file", Problems: r.secrets})
	}
	if n, ok := any(cfg).(Normalizer); ok {
		n.Normalize()
	}
	ch := checker{ctx: withFiles(ctx, r.read)}
	ch.walker().walk(root, v)
	if len(ch.probs) > 0 {
		return nil, locateAll(doc, &Error{Reason: ReasonValidation, Message: "the configuration is not valid; fix the fields listed", Problems: ch.probs})
	}
	return r, nil
}

// pinRestart sets the process's restart values on v (schema root) and
// refuses a change to any field that is not restart-class: those must
// come from the file or the cluster, never from a process's start.
func (c *compiler[T]) pinRestart(root *node, v reflect.Value) error {
	before := deepCopy(v)
	c.restart(v.Addr().Interface().(*T))
	var wrong []string
	for _, ch := range diffValues(root, before, v, nil, nil, nil) {
		if !ch.Class.requiresRestart() {
			wrong = append(wrong, ch.Path)
		}
	}
	if len(wrong) == 0 {
		return nil
	}
	return &Error{Reason: ReasonInternal, Message: fmt.Sprintf("the restart values changed %d field(s) that are not restart-class (%s); it may set restart-class fields only",
		len(wrong), strings.Join(wrong[:min(len(wrong), maxListedPaths)], ", "))}
}

// resolver is the visitor that resolves secret references and digests the
// files that file fields name.
type resolver struct {
	files      map[string]string // path of each file field -> content digest
	fileClass  map[string]fieldClass
	local      map[string]bool // paths of the hostfile fields among files
	baseDir    string
	lookupEnv  func(string) (string, bool)
	propagated bool
	secrets    []Problem
	literal    []Problem

	ctx        context.Context
	read       *attemptFiles // each file field's file, read once
	fileErrs   []Problem     // referenced files refused (file_* reasons)
	fileReason Reason        // the first refusal's reason
	ctxErr     error         // the attempt ended during the walk
}

// fileFailed records a referenced file that failed to read: a refusal is a
// problem of its field, the end of the attempt stops the walk.
func (r *resolver) fileFailed(path string, err error) {
	var e *Error
	if !errors.As(err, &e) {
		r.ctxErr = err
		return
	}
	if r.fileReason == "" {
		r.fileReason = e.Reason
	}
	r.fileErrs = append(r.fileErrs, Problem{Path: path, Detail: e.Message})
}

// readSecretFile reads a ${file:} secret with the attempt's bound, as a
// credential (see readCredential).
func (r *resolver) readSecretFile(path string) ([]byte, error) {
	return r.read.readCredential(r.ctx, path)
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
		res, err := s.resolve(r.lookupEnv, r.readSecretFile)
		var refused *Error
		switch {
		case errors.As(err, &refused) || (err != nil && r.ctx.Err() != nil):
			r.fileFailed(w.path(), err)
			return false
		case err != nil:
			r.secrets = append(r.secrets, Problem{Path: w.path(), Detail: err.Error()})
			return false
		}
		v.Set(reflect.ValueOf(res))
	case n.file && v.String() != "":
		if r.files == nil {
			r.files, r.fileClass = map[string]string{}, map[string]fieldClass{}
		}
		name := v.String()
		if !filepath.IsAbs(name) && r.baseDir != "" {
			name = filepath.Join(r.baseDir, name)
		}
		p := w.path()
		d, err := r.read.digest(r.ctx, name)
		if err != nil {
			r.fileFailed(p, err)
			return false
		}
		r.files[p], r.fileClass[p] = d, n.class
		if n.local {
			if r.local == nil {
				r.local = map[string]bool{}
			}
			r.local[p] = true
		}
	}
	return true
}
