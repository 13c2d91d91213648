package reconftest_test

import (
	"testing"

	"github.com/reconfhq/reconf/reconftest"
)

type classified struct {
	A int `yaml:"a" reconf:"live"`
	B struct {
		C string `yaml:"c"`
	} `yaml:"b" reconf:"restart"`
}

type unclassified struct {
	A int `yaml:"a" reconf:"live"`
	D int `yaml:"d"`
}

// fakeT records failures instead of stopping the test, so the helper's
// failure path can be checked.
type fakeT struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = format
}

func TestRequireClassified(t *testing.T) {
	reconftest.RequireClassified[classified](t)
	f := &fakeT{TB: t}
	reconftest.RequireClassified[unclassified](f)
	if !f.failed {
		t.Fatal("RequireClassified passed a type with an unclassified field")
	}
}
