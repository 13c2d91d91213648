package reconf

import "testing"

// TestLocateMissingField: a required field that is absent is placed where
// it belongs: in the list element that lacks it, not at the list's key;
// under a mapping, at that mapping's key.
func TestLocateMissingField(t *testing.T) {
	src := `server:
  address: 127.0.0.1:8080
routing:
  default_route: stub
backends:
  - name: stub
  - timeout: 5s
    weight: 3
`
	e := wantReason(t, mustFail(compileTest(src)), ReasonValidation)
	if len(e.Problems) != 1 {
		t.Fatalf("problems = %v, want one", e.Problems)
	}
	if p := e.Problems[0]; p.Path != "backends[1].name" || p.Line != 7 || p.Column != 5 {
		t.Errorf("got %s at %d:%d, want backends[1].name at 7:5 (the element without a name)", p.Path, p.Line, p.Column)
	}

	e = wantReason(t, mustFail(compileTest("routing:\n  max_attempts: 3\nbackends:\n  - name: stub\n")), ReasonValidation)
	if p := e.Problems[0]; p.Path != "routing.default_route" || p.Line != 1 || p.Column != 1 {
		t.Errorf("got %s at %d:%d, want routing.default_route at 1:1 (the routing key)", p.Path, p.Line, p.Column)
	}
}
