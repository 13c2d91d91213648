package termtext

import (
	"bytes"
	"fmt"
	"testing"
	"text/tabwriter"
)

func TestClean(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text, table\tcells\nand lines", "plain text, table\tcells\nand lines"},
		{"CN=a\x1b]0;owned\x07b", `CN=a\x1b]0;owned\x07b`},
		{"\x1b[2J\x1b[Hclear", `\x1b[2J\x1b[Hclear`},
		{"carriage\rreturn", `carriage\x0dreturn`},
		{"del\x7f", `del\x7f`},
		{"c1 \u009b31m csi", `c1 \u009b31m csi`},
		{"bidi \u202eevil", `bidi \u202eevil`},
		{"bad \xff utf-8", `bad \xff utf-8`},
		{"kept: é, 日本, \ufffd", "kept: é, 日本, \ufffd"},
	}
	for _, tt := range tests {
		if got := Clean(tt.in); got != tt.want {
			t.Errorf("Clean(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestWriterUnderTabwriter: a table written through a Writer loses its
// escapes (cells cleaned before the tabwriter keep their alignment too).
func TestWriterUnderTabwriter(t *testing.T) {
	var out bytes.Buffer
	tw := tabwriter.NewWriter(NewWriter(&out), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "A\tB")
	fmt.Fprintln(tw, "x\x1b[31m\tcertificate CN=é")
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	if want := `x\x1b[31m`; !bytes.Contains(out.Bytes(), []byte(want)) {
		t.Errorf("got %q, want it to hold %q", out.String(), want)
	}
	if bytes.ContainsRune(out.Bytes(), 0x1b) {
		t.Errorf("an escape went through")
	}
}
