//go:build unix

package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestManagementTokenFileRotates serves with the management token in a
// file (RECONF_MANAGEMENT_TOKEN_FILE): after the file is replaced and
// the service reloads (SIGHUP), the old token is refused and the new one
// works, without a restart; an unusable file keeps the current token.
func TestManagementTokenFileRotates(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	oldToken, newToken := "old-token-0123456789abcdef", "new-token-fedcba9876543210"
	writeAtomic(t, tokenFile, oldToken+"\n")
	s := startServer(t, config(4, "0s"), []string{"--management-address", "127.0.0.1:0"}, "RECONF_MANAGEMENT_TOKEN_FILE="+tokenFile)
	status := func(token string) int {
		t.Helper()
		return s.do("GET", "http://"+s.mgmt+"/admin/config/status", "", "Authorization", "Bearer "+token).status
	}
	if got := status(oldToken); got != 200 {
		t.Fatalf("status with the file's token: %d", got)
	}
	if got := status(newToken); got != 401 {
		t.Fatalf("status with another token: %d, want 401", got)
	}

	writeAtomic(t, tokenFile, newToken+"\n")
	s.signal(syscall.SIGHUP)
	waitLog(t, s, "management token rotated from its file")
	if got := status(oldToken); got != 401 {
		t.Errorf("the old token after rotation: %d, want 401", got)
	}
	if got := status(newToken); got != 200 {
		t.Errorf("the new token after rotation: %d, want 200", got)
	}

	// A token file that became unusable keeps the current token.
	writeAtomic(t, tokenFile, "short\n")
	s.signal(syscall.SIGHUP)
	waitLog(t, s, "management token file could not be re-read")
	if got := status(newToken); got != 200 {
		t.Errorf("the current token after a bad token file: %d, want 200", got)
	}
	if strings.Contains(s.logs.String(), newToken) || strings.Contains(s.logs.String(), oldToken) {
		t.Error("a token appears in the log")
	}
}

// waitLog waits up to 10s for the server's output to contain text.
func waitLog(t *testing.T, s *server, text string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.logs.String(), text) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", text, s.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
