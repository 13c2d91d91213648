package reconftest

import (
	"testing"
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

func TestRequireClassified(t *testing.T) {
	RequireClassified[classified](t)
	rec := &recordingT{TB: t}
	RequireClassified[unclassified](rec)
	if len(rec.failures()) == 0 {
		t.Fatal("RequireClassified passed a type with an unclassified field")
	}
}
