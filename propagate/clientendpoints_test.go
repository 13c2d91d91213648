package propagate

import (
	"errors"
	"strings"
	"testing"
)

// TestConnectRefusesMixedSchemes: endpoints that mix plain and TLS
// schemes are refused before anything is dialled, naming every endpoint
// without its credentials and the reason; one scheme throughout, or
// endpoints without a scheme, pass.
func TestConnectRefusesMixedSchemes(t *testing.T) {
	for _, tc := range []struct {
		endpoints []string
		mixed     bool
	}{
		{[]string{"http://127.0.0.1:2379", "http://127.0.0.1:2380"}, false},
		{[]string{"https://10.0.0.1:2379", "HTTPS://10.0.0.2:2379"}, false},
		{[]string{"unix:///run/etcd.sock", "http://127.0.0.1:2379"}, false},
		{[]string{"10.0.0.1:2379", "https://10.0.0.2:2379"}, false},
		{[]string{"http://10.0.0.1:2379", "https://10.0.0.2:2379"}, true},
		{[]string{"https://10.0.0.1:2379", "https://10.0.0.2:2379", "http://u:s3cret@10.0.0.3:2379"}, true},
		{[]string{"unixs:///run/etcd.sock", "unix:///run/etcd2.sock"}, true},
	} {
		err := CheckEndpointSchemes(tc.endpoints)
		var se *EndpointSchemesError
		if errors.As(err, &se) != tc.mixed {
			t.Errorf("%v: got %v, want mixed %t", tc.endpoints, err, tc.mixed)
			continue
		}
		if !tc.mixed {
			continue
		}
		msg := err.Error()
		if !strings.HasSuffix(msg, "("+ReasonEndpointsMixedSchemes+")") || strings.Contains(msg, "s3cret") {
			t.Errorf("got %q, want the reason last and no password", msg)
		}
		for _, ep := range tc.endpoints {
			if host := ep[strings.LastIndexAny(ep, "@/")+1:]; !strings.Contains(msg, host) {
				t.Errorf("got %q, want %s named", msg, host)
			}
		}
		if cli, err := ConnectWith(ClientConfig{Endpoints: tc.endpoints}, testLogger()); !errors.As(err, &se) {
			if cli != nil {
				_ = cli.Close()
			}
			t.Errorf("ConnectWith(%v): got %v, want the refusal", tc.endpoints, err)
		}
	}
}
