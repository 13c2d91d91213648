//go:build unix

package safefile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestCredentialModes: each cause has its own sentinel; group read is
// allowed; a symlink is judged by its target.
func TestCredentialModes(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		mode os.FileMode
		want error
	}{
		{0o600, nil},
		{0o400, nil},
		{0o640, nil},
		{0o440, nil},
		{0o644, ErrCredentialReadable},
		{0o604, ErrCredentialReadable},
		{0o620, ErrCredentialWritable},
		{0o602, ErrCredentialWritable},
		{0o666, ErrCredentialWritable},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			p := filepath.Join(dir, "cred-"+tt.mode.String())
			if err := os.WriteFile(p, []byte("s3cret-credential"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tt.mode); err != nil {
				t.Fatal(err)
			}
			link := p + ".link"
			if err := os.Symlink(p, link); err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{p, link} {
				b, err := ReadCredential(context.Background(), path, 1<<10)
				switch {
				case tt.want == nil && (err != nil || string(b) != "s3cret-credential"):
					t.Errorf("%s: got %q, %v; want the content", path, b, err)
				case tt.want != nil && !errors.Is(err, tt.want):
					t.Errorf("%s: got %v, want %v", path, err, tt.want)
				case tt.want != nil && b != nil:
					t.Errorf("%s: content returned with an error", path)
				}
			}
		})
	}
}

// TestCredentialOwner: a file of another user is refused; one of root is
// not. Changing a file's owner needs root.
func TestCredentialOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	p := filepath.Join(t.TempDir(), "cred")
	if err := os.WriteFile(p, []byte("s3cret-credential"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := ReadCredential(context.Background(), p, 1<<10)
	var ce *CredentialError
	if !errors.Is(err, ErrCredentialOwner) || !errors.As(err, &ce) || ce.UID != 65534 {
		t.Fatalf("got %v, want ErrCredentialOwner for uid 65534", err)
	}
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCredential(context.Background(), p, 1<<10); err != nil {
		t.Fatalf("a root-owned 0600 file: %v", err)
	}
}

// TestCredentialNotRegular: ReadCredential keeps ReadFile's refusals.
func TestCredentialNotRegular(t *testing.T) {
	if _, err := ReadCredential(context.Background(), "/dev/null", 1<<10); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("got %v, want ErrNotRegular", err)
	}
	if _, err := ReadCredential(context.Background(), t.TempDir(), 1<<10); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("a directory: got %v, want ErrNotRegular", err)
	}
}
