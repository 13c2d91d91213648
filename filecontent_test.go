//go:build unix

package reconf

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/reasons"
	"github.com/reconfhq/reconf/internal/testkit"
)

type fileConfig struct {
	Key    Secret `yaml:"key" reconf:"live"`
	Prompt string `yaml:"prompt" reconf:"live,file"`
}

// promptConsumer keeps what FileContent gave Prepare, and can run a hook
// inside Prepare (to rewrite the file there).
type promptConsumer struct {
	mu      sync.Mutex
	got     string
	inside  func()
	lastErr error
}

func (c *promptConsumer) Prepare(ctx context.Context, _, next *fileConfig) (Prepared, error) {
	if c.inside != nil {
		c.inside()
	}
	if next.Prompt == "" {
		return &Staged{}, nil
	}
	data, err := FileContent(ctx, next.Prompt)
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &Staged{OnCommit: func() { c.mu.Lock(); c.got = string(data); c.mu.Unlock() }}, nil
}

func (c *promptConsumer) value() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got
}

// hostile makes, in dir, one path per kind of file that must be refused
// without blocking or reading past the bound.
func hostile(t *testing.T, dir string) map[string]struct {
	path string
	want Reason
} {
	t.Helper()
	fifo, zero := testkit.HostileFiles(t, dir)
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	out := map[string]struct {
		path string
		want Reason
	}{
		"fifo":                 {fifo, reasons.FileNotRegular},
		"symlink to /dev/zero": {zero, reasons.FileNotRegular},
		"directory":            {dir, reasons.FileNotRegular},
		"over the bound":       {big, reasons.FileOversize},
	}
	if _, err := os.Stat("/proc/self/environ"); err == nil {
		out["/proc file"] = struct {
			path string
			want Reason
		}{"/proc/self/environ", reasons.FileNotRegular}
	}
	return out
}

// reloadWithin reloads rt and fails the test if the attempt does not end
// within d: a read blocked on a FIFO must fail fast, not hang the test.
func reloadWithin[T any](t *testing.T, rt *Runtime[T], d time.Duration) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res, err := rt.Reload(ctx, TriggerSDK)
	if err != nil {
		t.Fatalf("Reload did not answer within %v: %v", d, err)
	}
	return res
}

// TestReferencedFilesRefused: a ${file:} secret or a file field that names
// a FIFO, a device, a directory, a /proc file or an oversize file is
// refused at once with its own reason and outcome invalid, at start and on
// reload, and the next trigger after the fix is not busy.
func TestReferencedFilesRefused(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte("fine\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range hostile(t, dir) {
		for _, field := range []string{"secret", "file field"} {
			t.Run(name+"/"+field, func(t *testing.T) {
				doc := func(path string) string {
					if field == "secret" {
						return "key: ${file:" + path + "}\n"
					}
					return "prompt: " + path + "\n"
				}
				opts := []Option{
					WithLogger(discardLogger()),
					WithMaxSourceBytes(1024),
					WithConsumer(Key[any]("prompt"), &promptConsumer{}),
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := New[fileConfig](ctx, newMem(doc(tc.path)), opts...)
				var e *Error
				if !errors.As(err, &e) || e.Reason != tc.want || e.Outcome() != Invalid {
					t.Fatalf("New: got %v, want reason %s", err, tc.want)
				}
				if len(e.Problems) != 1 || e.Problems[0].Line != 1 {
					t.Fatalf("problems = %+v, want one located problem", e.Problems)
				}
				if strings.Contains(e.Error(), tc.path) && field == "secret" {
					t.Fatalf("the error names the secret's file: %v", e)
				}

				src := newMem(doc(good))
				rt, err := New[fileConfig](ctx, src, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer rt.Close(context.Background())
				src.set(doc(tc.path))
				res := reloadWithin(t, rt, 5*time.Second)
				if res.Outcome != Invalid || res.Reason != tc.want {
					t.Fatalf("reload: %s (%s: %s), want invalid (%s)", res.Outcome, res.Reason, res.Message, tc.want)
				}
				src.set(doc(good) + "\n")
				if res := reloadWithin(t, rt, 5*time.Second); res.Outcome != NoOp {
					t.Fatalf("reload after the fix: %s (%s)", res.Outcome, res.Reason)
				}
			})
		}
	}
}

// TestFileContentIsTheDigestedBytes: a file rewritten between compile and
// Prepare does not reach the consumer; the consumer gets the bytes whose
// digest the diff used, and the rewrite is a change on the next reload.
func TestFileContentIsTheDigestedBytes(t *testing.T) {
	dir := t.TempDir()
	prompt := filepath.Join(dir, "prompt.txt")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(prompt, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("v1")
	c := &promptConsumer{}
	rt, err := New[fileConfig](context.Background(), newMem("prompt: prompt.txt\n"),
		WithLogger(discardLogger()), WithBaseDir(dir), WithConsumer(Key[any]("prompt"), c))
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	if c.value() != "v1" {
		t.Fatalf("startup prompt %q", c.value())
	}
	write("v2")
	c.inside = func() { write("v3") } // after the digest, before the read in Prepare
	if res := reloadWithin(t, rt, 5*time.Second); res.Outcome != Published {
		t.Fatalf("reload: %s (%s)", res.Outcome, res.Reason)
	}
	if c.value() != "v2" {
		t.Fatalf("consumer got %q, want the digested v2", c.value())
	}
	c.inside = nil
	if res := reloadWithin(t, rt, 5*time.Second); res.Outcome != Published || c.value() != "v3" {
		t.Fatalf("reload after the rewrite: %s (%s), consumer %q", res.Outcome, res.Reason, c.value())
	}
	// A file the attempt found missing is the consumer's decision.
	if err := os.Remove(prompt); err != nil {
		t.Fatal(err)
	}
	if res := reloadWithin(t, rt, 5*time.Second); res.Outcome != PreparationFailed || !errors.Is(c.lastErr, fs.ErrNotExist) {
		t.Fatalf("missing file: %s (%s), consumer error %v", res.Outcome, res.Reason, c.lastErr)
	}
}

// TestFileContentOutsideAnAttempt reads with the same checks.
func TestFileContentOutsideAnAttempt(t *testing.T) {
	fifo, _ := testkit.HostileFiles(t, t.TempDir())
	_, err := FileContent(context.Background(), fifo)
	var e *Error
	if !errors.As(err, &e) || e.Reason != reasons.FileNotRegular {
		t.Fatalf("got %v, want file_not_regular", err)
	}
}

// TestSecretFileKeptAsCredential: a ${file:} secret is a credential: its
// file is refused, with one reason per cause, when others may read it,
// anyone but its owner may write it, or another user owns it, after
// symlinks; group read is allowed. A file field (a prompt) is not a
// credential and keeps the ordinary rules.
func TestSecretFileKeptAsCredential(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("s3cret-value\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(write("world-readable-target", 0o644), link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		want       Reason // "" accepted
	}{
		{"0600", write("own", 0o600), ""},
		{"0440 (group read)", write("group", 0o440), ""},
		{"0644", write("world", 0o644), reasons.FileReadable},
		{"symlink to 0644", link, reasons.FileReadable},
		{"0660", write("groupw", 0o660), reasons.FileWritable},
		{"0606", write("otherw", 0o606), reasons.FileWritable},
	}
	if os.Geteuid() == 0 {
		p := write("nobody", 0o600)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, struct {
			name, path string
			want       Reason
		}{"owned by nobody", p, reasons.FileOwner})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []Option{WithLogger(discardLogger()), WithConsumer(Key[any]("prompt"), &promptConsumer{})}
			rt, err := New[fileConfig](context.Background(), newMem("key: ${file:"+tt.path+"}\n"), opts...)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				_ = rt.Close(context.Background())
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Reason != tt.want || e.Outcome() != Invalid {
				t.Fatalf("New: got %v, want reason %s", err, tt.want)
			}
			if strings.Contains(e.Error(), "s3cret-value") {
				t.Fatalf("the error holds the value: %v", e)
			}
			// The same file as a prompt, which is no credential, loads.
			rt, err = New[fileConfig](context.Background(), newMem("prompt: "+tt.path+"\n"), opts...)
			if err != nil {
				t.Fatalf("as a file field: %v", err)
			}
			_ = rt.Close(context.Background())
		})
	}
	// Resolve, for a service's own flags, applies the same rule.
	ref, err := SecretRef("${file:" + filepath.Join(dir, "world") + "}")
	if err != nil {
		t.Fatal(err)
	}
	var e *Error
	if _, err := ref.Resolve(nil); !errors.As(err, &e) || e.Reason != reasons.FileReadable {
		t.Fatalf("Resolve: got %v, want %s", err, reasons.FileReadable)
	}
}
