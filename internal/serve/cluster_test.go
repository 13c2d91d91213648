package serve

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/reconfhq/reconf/internal/exitcode"
)

// RECONF_CLUSTER_LEASE_TTL fills --cluster-lease-ttl when the flag is not
// given, within the same bounds; a bad value is refused by name.
func TestLeaseTTLFromEnv(t *testing.T) {
	for _, tc := range []struct {
		flag time.Duration
		env  string
		want time.Duration
		ok   bool
	}{
		{0, "", 0, true},
		{0, "20s", 20 * time.Second, true},
		{4 * time.Second, "20s", 4 * time.Second, true},
		{0, "1s", 0, false},
		{0, "2.5s", 0, false},
		{0, "1h", 0, false},
		{0, "soon", 0, false},
		{0, "0", 0, false},
		{0, "0s", 0, false},
	} {
		f := Options{LeaseTTL: tc.flag}
		err := f.LeaseFromEnv(func(k string) (string, bool) { return tc.env, k == EnvClusterLeaseTTL && tc.env != "" })
		if (err == nil) != tc.ok || (tc.ok && f.LeaseTTL != tc.want) {
			t.Errorf("flag %v, env %q: got %v, %v; want %v (ok %v)", tc.flag, tc.env, f.LeaseTTL, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), EnvClusterLeaseTTL) {
			t.Errorf("env %q: %v does not name the variable", tc.env, err)
		}
	}
}

// A malformed --cluster URL is refused without its password, whatever
// its form.
func TestClusterURLRefusalHidesPassword(t *testing.T) {
	for _, u := range []string{"user:s3cretpw@host:2379", "http:user:s3cretpw@host:2379"} {
		err := CheckClusterURLs([]string{u})
		if err == nil {
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: the refusal prints the password: %v", u, err)
		}
	}
}

// A --cluster list mixing http:// and https:// is a usage error at once,
// naming every endpoint and the reason; one scheme throughout passes.
func TestClusterURLsShareOneScheme(t *testing.T) {
	if err := CheckClusterURLs([]string{"https://10.0.0.1:2379", "https://10.0.0.2:2379"}); err != nil {
		t.Fatalf("one scheme: %v", err)
	}
	eps := []string{"https://10.0.0.1:2379", "http://10.0.0.2:2379"}
	err := CheckClusterURLs(eps)
	var ue *exitcode.Error
	if !errors.As(err, &ue) || ue.Code != exitcode.Usage {
		t.Fatalf("got %v, want a usage error", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "--cluster") || !strings.Contains(msg, eps[0]+","+eps[1]) || !strings.Contains(msg, "(cluster_endpoints_mixed_schemes)") {
		t.Errorf("got %q, want the flag, the endpoints and the reason", msg)
	}
}
