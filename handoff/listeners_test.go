package handoff_test

import (
	"testing"

	"github.com/reconfhq/reconf/handoff"
)

func TestSetAddRefusesBadNames(t *testing.T) {
	ln, err := handoff.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	set := handoff.NewSet()
	defer set.Close()
	for _, n := range []string{"", "a=b", "a,b"} {
		if err := set.Add(n, ln); err == nil {
			t.Errorf("name %q accepted", n)
		}
	}
	if err := set.Add("http", ln); err != nil || set.Addr("http").String() != ln.Addr().String() {
		t.Fatalf("Add: %v, addr %v", err, set.Addr("http"))
	}
	if _, err := handoff.Listen(ln.Addr().String()); err == nil {
		t.Error("a second socket bound the same address")
	}
}
