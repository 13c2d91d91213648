package admin_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/reconfhq/reconf/admin"
)

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "  "+testToken+"\n")
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.ReadTokenFile(good)
	if err != nil || tok.Reveal() != testToken {
		t.Fatalf("good file: %v", err)
	}
	if tok, err := admin.ReadTokenFile(link); err != nil || tok.Reveal() != testToken {
		t.Fatalf("a symlink to a good file: %v", err)
	}
	for name, c := range map[string]struct {
		path string
		want error
	}{
		"missing":   {filepath.Join(dir, "none"), admin.ErrTokenFile},
		"directory": {dir, admin.ErrTokenFile},
		"fifo":      {fifo, admin.ErrTokenFile},
		"device":    {"/dev/zero", admin.ErrTokenFile},
		"empty":     {write("empty", "\n"), admin.ErrTokenFile},
		"oversize":  {write("big", strings.Repeat("x", 5000)), admin.ErrTokenFile},
		"short":     {write("short", "abc\n"), admin.ErrTokenTooShort},
	} {
		_, err := admin.ReadTokenFile(c.path)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "xxxx") {
			t.Errorf("%s: the error quotes the file: %v", name, err)
		}
	}
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	c := admin.ConfigFromEnv(env(map[string]string{admin.EnvAddress: "127.0.0.1:0", admin.EnvTokenFile: good}))
	if c.Check() != nil || c.Token.Reveal() != testToken || c.TokenFile != good {
		t.Fatalf("ConfigFromEnv with a token file: %v", c.Check())
	}
	c = admin.ConfigFromEnv(env(map[string]string{admin.EnvAddress: "127.0.0.1:0", admin.EnvTokenFile: fifo}))
	if !errors.Is(c.Check(), admin.ErrTokenFile) {
		t.Fatalf("Check with a FIFO token file: %v", c.Check())
	}
	c = admin.ConfigFromEnv(env(map[string]string{admin.EnvAddress: "127.0.0.1:0", admin.EnvTokenFile: good, admin.EnvToken: testToken}))
	if !errors.Is(c.Check(), admin.ErrTokenFile) {
		t.Fatalf("Check with both a token and a token file: %v", c.Check())
	}
}

// TestSetTokenRotates: after SetToken the old token is refused and the new
// one accepted; a short token is refused and the current one stays.
func TestSetTokenRotates(t *testing.T) {
	e := start(t, setup{token: testToken})
	if a := e.do("GET", admin.StatusPath, ""); a.status != 200 {
		t.Fatalf("status with the token: %d", a.status)
	}
	next := "fedcba9876543210-next-token"
	if err := e.srv.SetToken("short"); !errors.Is(err, admin.ErrTokenTooShort) {
		t.Fatalf("SetToken(short): %v", err)
	}
	if a := e.do("GET", admin.StatusPath, ""); a.status != 200 {
		t.Fatalf("a refused SetToken changed the token: %d", a.status)
	}
	if err := e.srv.SetToken(next); err != nil {
		t.Fatal(err)
	}
	if a := e.do("GET", admin.StatusPath, ""); a.status != 401 {
		t.Fatalf("the old token after rotation: %d, want 401", a.status)
	}
	e.token = next
	if a := e.do("GET", admin.StatusPath, ""); a.status != 200 {
		t.Fatalf("the new token: %d", a.status)
	}
	open := start(t, setup{})
	if err := open.srv.SetToken(next); err == nil {
		t.Fatal("SetToken on a server started without a token succeeded")
	}
}
