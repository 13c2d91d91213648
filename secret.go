package reconf

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Redacted is what every rendering of a Secret prints.
const Redacted = "[REDACTED]"

// Secret is a configuration value that must never be shown: its String,
// GoString, every fmt verb, JSON, YAML, text and slog renderings all print
// Redacted. In YAML it is a literal or a reference, `${env:NAME}` or
// `${file:/abs/path}`, resolved when a candidate is compiled; Reveal returns
// the resolved value to the code that needs it. The zero Secret is empty.
//
// The value lives behind a pointer so that even a reflective dump of a
// struct holding a Secret prints an address, not the value.
type Secret struct{ b *secretBox }

type secretBox struct {
	ref      string // "" for a literal; else "${env:NAME}" or "${file:/path}"
	kind     string // "literal", "env" or "file"
	target   string // NAME or /path for references
	value    string
	resolved bool
}

// NewSecret returns a literal secret holding v, for configuration built in
// code.
func NewSecret(v string) Secret {
	return Secret{&secretBox{kind: "literal", value: v, resolved: true}}
}

// SecretRef returns an unresolved reference secret (`${env:NAME}` or
// `${file:/abs/path}`); it is resolved when its candidate is compiled.
func SecretRef(ref string) (Secret, error) {
	b, err := parseSecret(ref)
	if err != nil {
		return Secret{}, err
	}
	if b.kind == "literal" {
		return Secret{}, fmt.Errorf("reconf: not a secret reference; use ${env:NAME} or ${file:/abs/path}")
	}
	return Secret{b}, nil
}

func parseSecret(s string) (*secretBox, error) {
	if !strings.HasPrefix(s, "${") || !strings.HasSuffix(s, "}") {
		return &secretBox{kind: "literal", value: s, resolved: true}, nil
	}
	inner := s[2 : len(s)-1]
	kind, target, ok := strings.Cut(inner, ":")
	switch {
	case !ok:
		return nil, fmt.Errorf("secret reference must be ${env:NAME} or ${file:/abs/path}")
	case kind == "env" && target != "" && !strings.ContainsAny(target, "= \t"):
	case kind == "file" && filepath.IsAbs(target):
	case kind == "file":
		return nil, fmt.Errorf("file secret reference must be an absolute path")
	default:
		return nil, fmt.Errorf("secret reference must be ${env:NAME} or ${file:/abs/path}")
	}
	return &secretBox{ref: s, kind: kind, target: target}, nil
}

// Reveal returns the resolved value. It is the only way to read it.
func (s Secret) Reveal() string {
	if s.b == nil {
		return ""
	}
	return s.b.value
}

// IsZero reports whether the secret is empty (no literal, no reference).
func (s Secret) IsZero() bool { return s.b == nil || (s.b.ref == "" && s.b.value == "") }

// IsLiteral reports whether the secret was written as a literal value in the
// source. Only references may travel to other workers.
func (s Secret) IsLiteral() bool { return s.b != nil && s.b.kind == "literal" && s.b.value != "" }

// Reference returns the reference text (`${env:NAME}` or `${file:/path}`)
// and true, or "" and false for a literal or empty secret. A reference names
// where the value is, not the value, so it may be shown and propagated.
func (s Secret) Reference() (string, bool) {
	if s.b == nil || s.b.ref == "" {
		return "", false
	}
	return s.b.ref, true
}

// Kind returns "literal", "env", "file", or "" for the zero Secret.
func (s Secret) Kind() string {
	if s.b == nil {
		return ""
	}
	return s.b.kind
}

// Equal reports whether two secrets have the same reference and value.
func (s Secret) Equal(o Secret) bool { return s.fingerprint() == o.fingerprint() }

// fingerprint is a private digest used for diffs; it is never shown.
func (s Secret) fingerprint() [32]byte {
	if s.IsZero() {
		return [32]byte{} // absent and empty are the same configuration
	}
	return sha256.Sum256([]byte(s.b.ref + "\x00" + s.b.value))
}

// String returns Redacted.
func (s Secret) String() string { return Redacted }

// GoString returns Redacted, so %#v prints it too.
func (s Secret) GoString() string { return Redacted }

// Format prints Redacted for every verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(Redacted)) }

// LogValue makes slog print Redacted.
func (s Secret) LogValue() slog.Value { return slog.StringValue(Redacted) }

// MarshalJSON encodes Redacted.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + Redacted + `"`), nil }

// MarshalText encodes Redacted.
func (s Secret) MarshalText() ([]byte, error) { return []byte(Redacted), nil }

// MarshalYAML encodes Redacted.
func (s Secret) MarshalYAML() (any, error) { return Redacted, nil }

// UnmarshalYAML reads a literal or a reference. A malformed reference is an
// error that does not repeat the text.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal non-scalar into reconf.Secret", n.Line)}}
	}
	b, err := parseSecret(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: secret: %s", n.Line, err)}}
	}
	s.b = b
	return nil
}

// Resolve returns s with its reference resolved: ${env:NAME} through
// lookupEnv (os.LookupEnv when nil), ${file:/path} from the file (read with
// the bounded reader: a regular file of at most DefaultMaxSourceBytes,
// kept as a credential: not readable by others, writable by its owner
// alone, owned by this user or root; else an *Error with a file_* reason).
// A literal or an already resolved secret is returned as is. The error
// never holds a value. It is for settings outside a configuration file (a
// service's own flags); a runtime resolves its configuration's secrets
// itself, by the same rules.
func (s Secret) Resolve(lookupEnv func(string) (string, bool)) (Secret, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	return s.resolve(lookupEnv, func(path string) ([]byte, error) {
		return readCredential(context.Background(), path, DefaultMaxSourceBytes)
	})
}

// envName reports whether s is a conventional variable name (a letter or
// underscore, then letters, digits and underscores). Only such a name is
// shown in an error; anything else may be a value pasted by mistake.
func envName(s string) bool {
	for i, c := range s {
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// resolve returns a copy with the reference resolved, or an error naming
// the reference kind, never the value. readFile reads a ${file:} reference
// with the bounded reader; an *Error it returns (a refused file) is passed
// on as it is.
func (s Secret) resolve(lookupEnv func(string) (string, bool), readFile func(string) ([]byte, error)) (Secret, error) {
	if s.b == nil || s.b.resolved {
		return s, nil
	}
	nb := *s.b
	switch nb.kind {
	case "env":
		v, ok := lookupEnv(nb.target)
		if !ok && envName(nb.target) {
			return s, fmt.Errorf("env reference cannot be resolved: the variable %s is not set", nb.target)
		}
		if !ok {
			// Not a variable's name, perhaps a value pasted into the
			// reference: not echoed.
			return s, fmt.Errorf("env reference cannot be resolved: the variable is not set, and its name is not of letters, digits and underscores")
		}
		nb.value = v
	case "file":
		data, err := readFile(nb.target)
		var refused *Error
		switch {
		case errors.As(err, &refused):
			return s, err
		case errors.Is(err, fs.ErrNotExist):
			return s, fmt.Errorf("file reference cannot be resolved: the file does not exist")
		case err != nil:
			return s, fmt.Errorf("file reference cannot be resolved: %w", err)
		}
		nb.value = strings.TrimRight(string(data), "\r\n")
	}
	nb.resolved = true
	return Secret{&nb}, nil
}
