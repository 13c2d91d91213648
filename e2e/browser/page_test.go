// Package browser checks reconfd's status page in a real headless
// Chromium: it builds reconfd from this checkout, runs a fleet of two
// workers, logs in through the page's form, reads the rows the page
// shows and saves a screenshot. It is its own module so that the
// library's go.mod does not carry a browser driver.
//
// The test needs Debian's chromium (or RECONF_CHROMIUM naming a binary).
// Without one it skips, unless RECONF_REQUIRE_BROWSER is set (as CI
// does), in which case it fails. RECONF_SCREENSHOT names where to save
// the screenshot (default: the test's temporary directory).
package browser

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "browser-e2e-management-token-0123"

const config = `
server:
  address: 127.0.0.1:0
logging:
  level: info
routing:
  default_route: stub
backends:
  - name: stub
    kind: stub
    model: stub-1
    max_concurrency: %d
    timeout: 10s
    stub: { tokens: 4 }
model_aliases:
  gpt-4o-mini: stub
`

// chromium finds the browser, or skips (fails under RECONF_REQUIRE_BROWSER).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("RECONF_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("RECONF_REQUIRE_BROWSER") != "" {
		t.Fatal("no chromium found and RECONF_REQUIRE_BROWSER is set: install Debian's chromium (apt-get install chromium)")
	}
	t.Skip("no chromium found; install Debian's chromium, or set RECONF_REQUIRE_BROWSER to make this a failure")
	return ""
}

// writeAtomic writes data to a temporary file and renames it over path.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// logs collects reconfd's output.
type logs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logs) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s + "\n")
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var reMgmt = regexp.MustCompile(`msg="management listening" address=(\S+)`)

// startFleet builds reconfd and serves cfg with two workers; it returns
// the management address.
func startFleet(t *testing.T, cfg string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "reconfd")
	build := exec.Command("go", "build", "-o", bin, "github.com/reconfhq/reconf/cmd/reconfd")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building reconfd: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--config", cfg, "--workers", "2", "--management-address", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "RECONF_MANAGEMENT_TOKEN="+token, "XDG_RUNTIME_DIR="+t.TempDir())
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &logs{}
	addr := make(chan string, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l.add(sc.Text())
			if m := reMgmt.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { <-readDone; done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("reconfd did not stop on SIGTERM")
		}
		if t.Failed() {
			t.Logf("reconfd output:\n%s", l.String())
		}
	})
	select {
	case a := <-addr:
		return a
	case <-time.After(60 * time.Second):
		t.Fatalf("reconfd did not open management in time:\n%s", l.String())
		return ""
	}
}

// openBrowser starts a headless browser with one tab, closed when the
// test ends, and returns the tab's context.
func openBrowser(t *testing.T, browser string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancel()
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// reload asks the fleet to reload through the API, as an operator would.
func reload(t *testing.T, mgmt string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+mgmt+"/admin/config/reload", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"outcome":"published"`) {
		t.Fatalf("reload: %d %s", resp.StatusCode, b)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestStatusPage logs in through the form and reads the page: two worker
// rows at the cluster version, converged, the reload in the history with
// both applies, the gate's limit; the session cookie is not readable by
// script, and captured on another port of the host it reads nothing. It
// saves a screenshot.
func TestStatusPage(t *testing.T) {
	browser := chromium(t)
	cfg := filepath.Join(t.TempDir(), "reconfd.yaml")
	writeAtomic(t, cfg, fmt.Sprintf(config, 8))
	mgmt := startFleet(t, cfg)
	writeAtomic(t, cfg, fmt.Sprintf(config, 12))
	reload(t, mgmt)

	ctx := openBrowser(t, browser)

	page := "http://" + mgmt + "/admin/"
	if err := chromedp.Do(ctx, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("token"))); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	loginTitle, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	err = chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("workers")),
		// Both rows show once both workers have applied the reload.
		chromedp.Poll[chromedp.Void](`document.querySelectorAll("#workers tbody tr").length === 2 &&
			document.getElementById("convergence").innerText.includes("Converged")`,
			chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(500*time.Millisecond)),
	)
	if err != nil {
		t.Fatalf("logging in: %v", err)
	}
	text := func(id string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id)))
		if err != nil {
			t.Fatalf("reading #%s: %v", id, err)
		}
		return s
	}
	workers, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#workers tbody tr")).map(r => r.innerText)`))
	if err != nil {
		t.Fatal(err)
	}
	converged, history, gate := text("convergence"), text("history"), text("gate")
	cookies, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 is a PNG
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(loginTitle, "log in") {
		t.Errorf("the first page was %q, not the login form", loginTitle)
	}
	if len(workers) != 2 {
		t.Fatalf("worker rows %q, want 2", workers)
	}
	for _, w := range workers {
		if !strings.Contains(w, "\t2\t") || !strings.Contains(w, "ok") {
			t.Errorf("worker row %q: want applied version 2, state ok", w)
		}
	}
	if !strings.Contains(converged, "Converged: all 2 workers at version 2") {
		t.Errorf("convergence %q", converged)
	}
	if !strings.Contains(history, "published") || !strings.Contains(history, "2/2 applied") ||
		!strings.Contains(history, "backends[stub].max_concurrency") || !strings.Contains(history, "api token") {
		t.Errorf("history table:\n%s", history)
	}
	if !strings.Contains(gate, "stub") || !strings.Contains(gate, "12") {
		t.Errorf("gate table:\n%s", gate)
	}
	if cookies != "" {
		t.Errorf("a script can read the cookies %q; the session must be HttpOnly", cookies)
	}
	if strings.Contains(history+gate+converged, token) {
		t.Errorf("the token is on the page")
	}
	path := os.Getenv("RECONF_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "status-page.png")
	}
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))

	// Cookies are not isolated by port: a server on another port of the
	// host receives the session cookie when the browser visits it.
	// Replayed alone to the management listener, it reads nothing.
	captured := make(chan string, 1)
	trap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case captured <- r.Header.Get("Cookie"):
		default:
		}
		_, _ = io.WriteString(w, "<!doctype html><title>elsewhere</title>")
	}))
	defer trap.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(trap.URL+"/")); err != nil {
		t.Fatalf("visiting another port: %v", err)
	}
	var cookie string
	select {
	case cookie = <-captured:
	case <-time.After(10 * time.Second):
		t.Fatal("the other port saw no request")
	}
	if !strings.Contains(cookie, "reconf_session=") {
		t.Fatalf("the browser sent %q to another port: this browser isolates cookies by port, so the replay below shows nothing", cookie)
	}
	for _, path := range []string{"/admin/config/status", "/admin/config/history", "/admin/"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+mgmt+path, nil)
		req.Header.Set("Cookie", cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(b), "workers") {
			t.Errorf("%s with the captured cookie: %d, want 401 and nothing read", path, resp.StatusCode)
		}
	}

	// A cross-site page cannot log in: the same form posted from another
	// origin is refused before the token is looked at.
	req, _ := http.NewRequest(http.MethodPost, "http://"+mgmt+"/admin/login", strings.NewReader("token="+token))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("cross-site login: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	http.DefaultClient.CloseIdleConnections()
}
