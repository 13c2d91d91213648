package reconftest

import (
	"reflect"
	"testing"

	"github.com/reconfhq/reconf/internal/fieldclass"
)

// RequireClassified fails t when any field of T has no class, or when T's
// reconf, default or validate tags have a mistake. Put it in a test of your
// configuration type so that a new unclassified field fails CI:
//
//	func TestConfigClassified(t *testing.T) { reconftest.RequireClassified[Config](t) }
func RequireClassified[T any](t testing.TB) {
	t.Helper()
	if err := fieldclass.Check(reflect.TypeFor[T]()); err != nil {
		t.Fatalf("configuration type is not fully classified: %v", err)
	}
}
