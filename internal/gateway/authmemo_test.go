package gateway

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/reconfhq/reconf"
)

// TestAuthMemoFollowsTheKeys drives one keep-alive connection, where the
// memo of the admitted key lives: a key revoked by a reload is refused on
// the very connection it was admitted on, a different header is checked
// afresh, and a key added by the reload is let in. The checks that must
// refuse are list requests: they have no body, so nothing refuses them
// before the handler (a chat completion's key is also tested before its
// body is read, against the active generation, and a refusal there closes
// the connection).
func TestAuthMemoFollowsTheKeys(t *testing.T) {
	tg := startGateway(t, authConfig)
	c, err := net.Dial("tcp", strings.TrimPrefix(tg.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	do := func(method, path, auth string) int {
		t.Helper()
		var body *strings.Reader
		if method == "POST" {
			body = strings.NewReader(`{"model":"stub-1","messages":[{"role":"user","content":"hi"}]}`)
		} else {
			body = strings.NewReader("")
		}
		req, _ := http.NewRequest(method, tg.url+path, body)
		req.Header.Set("Authorization", auth)
		if method == "POST" {
			req.Header.Set("Content-Type", "application/json")
		}
		if err := req.Write(c); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = bufio.NewReader(resp.Body).WriteTo(discard{})
		if resp.Close {
			t.Fatalf("the gateway closed the connection (HTTP %d)", resp.StatusCode)
		}
		return resp.StatusCode
	}
	chat := func(auth string) int { return do("POST", "/v1/chat/completions", auth) }
	models := func(auth string) int { return do("GET", "/v1/models", auth) }
	for i := range 3 { // admitted, then admitted from the memo
		if st := chat("Bearer key-alpha-0001"); st != 200 {
			t.Fatalf("request %d with a key: got %d", i, st)
		}
	}
	if st := models("Bearer key-alpha-0002"); st != 401 {
		t.Fatalf("another header on the same connection: got %d, want 401", st)
	}
	if st := models("Bearer key-alpha-0001"); st != 200 {
		t.Fatalf("the key again: got %d", st)
	}
	if res := tg.reload(strings.Replace(authConfig, "key-alpha-0001", "key-delta-0004", 1)); res.Outcome != reconf.Published {
		t.Fatalf("reload: %+v", res)
	}
	if st := models("Bearer key-alpha-0001"); st != 401 {
		t.Fatalf("a key revoked by a reload, on the connection it was admitted on: got %d, want 401", st)
	}
	if st := chat("Bearer key-delta-0004"); st != 200 {
		t.Fatalf("the new key: got %d", st)
	}
	if st := models("Bearer key-delta-0004"); st != 200 {
		t.Fatalf("the new key, from the memo: got %d", st)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestAuthorizationNameInAnyCase sends the key under header names in other
// cases (HTTP names are case-insensitive, and some clients send them in
// lower case), next to a cookie: the gateway finds the header under
// fasthttp's canonical name, not by Peek, and must find it there.
func TestAuthorizationNameInAnyCase(t *testing.T) {
	tg := startGateway(t, authConfig)
	body := `{"model":"stub-1","messages":[{"role":"user","content":"hi"}]}`
	for _, name := range []string{"authorization", "AUTHORIZATION", "aUtHoRiZaTiOn"} {
		for _, key := range []string{"key-alpha-0001", "key-wrong-0009"} {
			c, err := net.Dial("tcp", strings.TrimPrefix(tg.url, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			raw := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nCookie: a=b\r\nContent-Type: application/json\r\n" +
				name + ": Bearer " + key + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			if _, err := c.Write([]byte(raw)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			c.Close()
			want := 200
			if key == "key-wrong-0009" {
				want = 401
			}
			if resp.StatusCode != want {
				t.Errorf("%s: Bearer %s: got %d, want %d", name, key, resp.StatusCode, want)
			}
		}
	}
}

// TestAuthorizationLeavesCookies: finding the Authorization header does no
// work on the request's other headers. A walk of fasthttp's All parsed
// the Cookie header into cookies and wrote them out again on every call
// (seen here as the header rewritten, "a=b;c=d" read back as "a=b; c=d"):
// about 100 µs a call for a 15 KB Cookie header, which any client may
// send, authorised or not, against 30 µs for a whole proxied request.
func TestAuthorizationLeavesCookies(t *testing.T) {
	for _, raw := range []string{
		"POST / HTTP/1.1\r\nHost: x\r\nCookie: a=b;c=d\r\nAuthorization: Bearer k\r\nContent-Length: 0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nauthorization: Bearer k\r\nCookie: a=b;c=d\r\nAuthorization: Bearer other\r\nContent-Length: 0\r\n\r\n",
	} {
		var h fasthttp.RequestHeader
		if err := h.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if got := string(authorization(&h)); got != "k" {
				t.Errorf("authorization: %q, want the first one's token, \"k\"", got)
			}
		}
		if got := string(h.Peek("Cookie")); got != "a=b;c=d" {
			t.Errorf("the Cookie header reads %q after the lookup, want it as sent, \"a=b;c=d\"", got)
		}
	}
}

// TestSameBytes compares sameBytes with bytes.Equal on every length up to
// the memo's bound, with one bit flipped at each position.
func TestSameBytes(t *testing.T) {
	for n := range maxMemoHeader + 1 {
		a := make([]byte, n)
		for i := range a {
			a[i] = byte(i*7 + n)
		}
		b := bytes.Clone(a)
		if !sameBytes(a, b) {
			t.Fatalf("length %d: equal bytes reported different", n)
		}
		for i := range n {
			for bit := range 8 {
				b[i] ^= 1 << bit
				if sameBytes(a, b) {
					t.Fatalf("length %d: bit %d of byte %d flipped, reported equal", n, bit, i)
				}
				b[i] ^= 1 << bit
			}
		}
	}
}
