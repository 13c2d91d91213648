package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/reconfhq/reconf"
	"github.com/reconfhq/reconf/admin"
)

// A service starts the management API beside its runtime and an operator
// asks for a reload.
func Example() {
	type Config struct {
		Limit int `yaml:"limit" reconf:"live"`
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := reconf.New[Config](ctx, reconf.Bytes("example", []byte("limit: 1\n")), reconf.WithLogger(quiet))
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)

	srv, err := admin.New(rt, admin.WithLogger(quiet)) // no token: loopback only
	if err != nil {
		panic(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		panic(err)
	}
	defer srv.Shutdown(ctx)

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Post("http://"+srv.Addr().String()+admin.ReloadPath, "application/json", strings.NewReader("{}"))
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var res reconf.Result
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		panic(err)
	}
	fmt.Println(resp.StatusCode, res.Outcome, res.Reason, res.Generation)
	// Output: 200 no-op unchanged 1
}

// CheckAddress is how a service decides whether management may start.
func ExampleCheckAddress() {
	for _, c := range []struct{ addr, token string }{
		{"", ""},
		{"127.0.0.1:9090", ""},
		{"0.0.0.0:9090", ""},
		{"0.0.0.0:9090", "too-short"},
		{"0.0.0.0:9090", "a-long-enough-management-token"},
	} {
		fmt.Printf("%q: %v\n", c.addr, admin.CheckAddress(c.addr, c.token))
	}
	// Output:
	// "": admin: management is off: no management address is set
	// "127.0.0.1:9090": <nil>
	// "0.0.0.0:9090": admin: management is off: a non-loopback address requires a bearer token (RECONF_MANAGEMENT_TOKEN)
	// "0.0.0.0:9090": admin: management token is shorter than 16 characters
	// "0.0.0.0:9090": <nil>
}
