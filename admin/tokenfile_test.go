package admin_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/testkit"
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
	fifo, _ := testkit.HostileFiles(t, dir)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	toks, err := admin.ReadTokenFile(good)
	if err != nil || len(toks) != 1 || toks[0].Name != "" || toks[0].Secret.Reveal() != testToken {
		t.Fatalf("good file: %v", err)
	}
	if toks, err := admin.ReadTokenFile(link); err != nil || len(toks) != 1 || toks[0].Secret.Reveal() != testToken {
		t.Fatalf("a symlink to a good file: %v", err)
	}
	for name, c := range map[string]struct {
		path string
		want error
	}{
		"missing":     {filepath.Join(dir, "none"), admin.ErrTokenFile},
		"directory":   {dir, admin.ErrTokenFile},
		"fifo":        {fifo, admin.ErrTokenFile},
		"device":      {"/dev/zero", admin.ErrTokenFile},
		"empty":       {write("empty", "\n"), admin.ErrTokenFile},
		"oversize":    {write("big", strings.Repeat("x", 5000)), admin.ErrTokenFile},
		"short":       {write("short", "abc\n"), admin.ErrTokenTooShort},
		"comments":    {write("comments", "# only a comment\n\n"), admin.ErrTokenFile},
		"3 fields":    {write("three", "alice xxxxxxxxxxxxxxxxxxxxxxxx more\n"), admin.ErrTokenFile},
		"bad name":    {write("badname", "al/ice xxxxxxxxxxxxxxxxxxxxxxxx\n"), admin.ErrTokenFile},
		"long name":   {write("longname", strings.Repeat("a", 65)+" xxxxxxxxxxxxxxxxxxxxxxxx\n"), admin.ErrTokenFile},
		"same name":   {write("samename", "bob xxxxxxxxxxxxxxxxxxxxxxxx\nbob xxxxxxxxxxxxxxxxxxxxxxxy\n"), admin.ErrTokenFile},
		"same token":  {write("sametoken", "bob xxxxxxxxxxxxxxxxxxxxxxxx\nann xxxxxxxxxxxxxxxxxxxxxxxx\n"), admin.ErrTokenFile},
		"short named": {write("shortnamed", "bob xxxx\n"), admin.ErrTokenTooShort},
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
	if c.Check() != nil || len(c.AcceptedTokens()) != 1 || c.AcceptedTokens()[0].Secret.Reveal() != testToken || c.TokenFile != good {
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

// TestTokenFileKeptAsCredential: the token file is refused, with one
// sentinel per cause, when others may read it, anyone but its owner may
// write it, another user owns it, or it is not a regular file, after
// symlinks; group read is allowed. A line that is not a token (another
// file's content: a password hash) is refused, so a link to /etc/shadow
// loads nothing.
func TestTokenFileKeptAsCredential(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(write("world", testToken+"\n", 0o644), link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, path string
		want       error // nil: accepted
	}{
		{"0600", write("own", testToken+"\n", 0o600), nil},
		{"0440", write("group", testToken+"\n", 0o440), nil},
		{"0644", filepath.Join(dir, "world"), admin.ErrTokenFileReadable},
		{"symlink to 0644", link, admin.ErrTokenFileReadable},
		{"0664", write("groupw", testToken+"\n", 0o664), admin.ErrTokenFileWritable},
		{"0602", write("otherw", testToken+"\n", 0o602), admin.ErrTokenFileWritable},
		{"device", "/dev/null", admin.ErrTokenFileNotRegular},
		{"shadow-like lines", write("shadow", "root:$6$0123456789abcdef$0123456789abcdef:19000:0:99999:7:::\n"+
			"daemon:*:19000:0:99999:7:::\nnobody:!:19000::::::\n", 0o600), admin.ErrTokenFile},
		{"passwd-like line", write("passwd", "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", 0o600), admin.ErrTokenFile},
	}
	if os.Geteuid() == 0 {
		p := write("nobody", testToken+"\n", 0o600)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name, path string
			want       error
		}{"owned by nobody", p, admin.ErrTokenFileOwner})
	}
	if _, err := os.Stat("/etc/shadow"); err == nil {
		shadow := filepath.Join(dir, "shadow-link")
		if err := os.Symlink("/etc/shadow", shadow); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name, path string
			want       error
		}{"link to /etc/shadow", shadow, admin.ErrTokenFile})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			toks, err := admin.ReadTokenFile(c.path)
			switch {
			case c.want == nil && (err != nil || len(toks) != 1):
				t.Fatalf("got %d tokens, %v; want the token", len(toks), err)
			case c.want != nil && (!errors.Is(err, c.want) || !errors.Is(err, admin.ErrTokenFile) || toks != nil):
				t.Fatalf("got %d tokens, %v; want %v", len(toks), err, c.want)
			}
			if err != nil && (strings.Contains(err.Error(), testToken) || strings.Contains(err.Error(), "$6$") || strings.Contains(err.Error(), "nologin")) {
				t.Errorf("the error quotes the file: %v", err)
			}
		})
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

// TestNamedTokens: a token file names its tokens; each authorizes, and the
// history's actor is the name of the token that started the attempt,
// never the token.
func TestNamedTokens(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	text := "# operators\nalice " + testToken + "-alice\n\n  bob   " + testToken + "-bob  \n" + testToken + "-anon\n"
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := admin.ReadTokenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tk := range toks {
		names = append(names, tk.Name)
	}
	if strings.Join(names, ",") != "alice,bob," || toks[1].Secret.Reveal() != testToken+"-bob" {
		t.Fatalf("tokens named %q", names)
	}
	e := start(t, setup{history: true, admin: []admin.Option{admin.WithTokens(toks...)}})
	for i, c := range []struct{ token, actor string }{
		{testToken + "-bob", "api token bob"},
		{testToken + "-alice", "api token alice"},
		{testToken + "-anon", "api token"},
	} {
		e.token = c.token
		e.src.set(yamlOf("127.0.0.1:8080", 5+i, canaryNext))
		if a := e.do("POST", admin.ReloadPath, ""); a.status != http.StatusOK {
			t.Fatalf("reload with %s's token: %d %s", c.actor, a.status, a.body)
		}
		if got := e.history.Entries(1)[0].Actor; got != c.actor {
			t.Errorf("actor %q, want %q", got, c.actor)
		}
	}
	e.token = testToken + "-carol"
	if a := e.do("POST", admin.ReloadPath, ""); a.status != http.StatusUnauthorized {
		t.Errorf("a token not in the file: %d", a.status)
	}
	// Rotation: bob leaves; his token stops working at once, alice's stays.
	if err := e.srv.SetTokens(toks[0]); err != nil {
		t.Fatal(err)
	}
	e.token = testToken + "-bob"
	if a := e.do("GET", admin.StatusPath, ""); a.status != http.StatusUnauthorized {
		t.Errorf("bob after rotation: %d", a.status)
	}
	e.token = testToken + "-alice"
	if a := e.do("GET", admin.StatusPath, ""); a.status != http.StatusOK {
		t.Errorf("alice after rotation: %d", a.status)
	}
	if err := e.srv.SetTokens(); err == nil {
		t.Error("SetTokens with no token must fail")
	}
	if _, err := admin.New(e.rt, admin.WithTokens(admin.Token{Name: "bad name", Secret: reconf.NewSecret(testToken)})); err == nil {
		t.Error("New with a bad token name must fail")
	}
}
