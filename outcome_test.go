package reconf

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
)

func TestOutcomeTable(t *testing.T) {
	tests := []struct {
		o      Outcome
		name   string
		status int
	}{
		{Published, "published", http.StatusOK},
		{NoOp, "no-op", http.StatusOK},
		{RestartRequired, "restart-required", http.StatusConflict},
		{RetentionBlocked, "retention-blocked", http.StatusConflict},
		{Busy, "busy", http.StatusConflict},
		{Invalid, "invalid", http.StatusUnprocessableEntity},
		{SourceIntegrityFailed, "source-integrity-failed", http.StatusUnprocessableEntity},
		{Canceled, "canceled", http.StatusServiceUnavailable},
		{PreparationFailed, "preparation-failed", http.StatusServiceUnavailable},
		{InternalFailed, "internal-failed", http.StatusServiceUnavailable},
		{PreconditionFailed, "precondition-failed", http.StatusPreconditionFailed},
	}
	if got := len(Outcomes()); got != len(tests) {
		t.Fatalf("Outcomes() has %d values, table has %d", got, len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.o.String(); got != tt.name {
				t.Errorf("String() = %q, want %q", got, tt.name)
			}
			if got := tt.o.HTTPStatus(); got != tt.status {
				t.Errorf("HTTPStatus() = %d, want %d", got, tt.status)
			}
			b, err := tt.o.MarshalText()
			if err != nil {
				t.Fatal(err)
			}
			var back Outcome
			if err := back.UnmarshalText(b); err != nil || back != tt.o {
				t.Errorf("round trip = %v, %v; want %v", back, err, tt.o)
			}
		})
	}
	var bad Outcome
	if err := bad.UnmarshalText([]byte("exploded")); err == nil {
		t.Error("UnmarshalText accepted an unknown name")
	}
	if b, err := Outcome(0).MarshalText(); err != nil || len(b) != 0 {
		t.Errorf("zero outcome = %q, %v; want empty", b, err)
	}
	if _, err := Outcome(42).MarshalText(); err == nil {
		t.Error("MarshalText accepted an unknown outcome")
	}
	if Outcome(99).HTTPStatus() != http.StatusInternalServerError {
		t.Error("unknown outcome must map to 500")
	}
}

func TestEveryReasonHasAnOutcome(t *testing.T) {
	for _, r := range Reasons() {
		if !r.Outcome().valid() {
			t.Errorf("reason %q has no outcome", r)
		}
	}
	if Reason("nonsense").Outcome() != InternalFailed {
		t.Error("an unknown reason must be internal-failed")
	}
}

// TestReasonsListTheInternalOnes: every reason of internal/reasons, which
// the API does not name, is still in Reasons() with an outcome, so a new
// one cannot be produced without its place in the closed set.
func TestReasonsListTheInternalOnes(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("internal", "reasons", "reasons.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for _, v := range s.(*ast.ValueSpec).Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("a reason that is not a string literal: %#v", v)
				}
				r, _ := strconv.Unquote(lit.Value)
				if _, ok := reasonOutcome[Reason(r)]; !ok {
					t.Errorf("reason %q of internal/reasons has no outcome here, so Reasons() lacks it", r)
				}
				n++
			}
		}
	}
	if n < 16 {
		t.Fatalf("found %d reasons in internal/reasons, want at least 16", n)
	}
}
