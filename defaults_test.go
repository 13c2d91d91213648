package reconf

import (
	"context"
	"errors"
	"testing"
	"time"
)

// defaultsConfig has a default on every kind a default can fill.
type defaultsConfig struct {
	Enabled bool          `yaml:"enabled" default:"true"`
	Rate    int           `yaml:"rate" default:"10" env:"TEST_DEFAULTS_RATE"`
	Timeout time.Duration `yaml:"timeout" default:"30s"`
	Tokens  int           `yaml:"tokens" default:"16" validate:"min=1"`
	Limit   *int          `yaml:"limit" default:"5"`
	Ratio   float64       `yaml:"ratio" default:"0.5"`
	Nested  struct {
		Level string `yaml:"level" default:"info"`
	} `yaml:"nested"`
	Items []struct {
		Name   string `yaml:"name"`
		Weight int    `yaml:"weight" default:"3"`
	} `yaml:"items"`
}

func compileDefaults(t *testing.T, src string, env map[string]string, overrides ...func(*defaultsConfig)) (*defaultsConfig, error) {
	t.Helper()
	c := compiler[defaultsConfig]{lookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, overrides: overrides}
	cand, err := c.compile(context.Background(), []byte(src))
	if err != nil {
		return nil, err
	}
	return cand.cfg, nil
}

// TestDefaultFillsOnlyAbsentFields is defect 1: a default used to replace
// an explicit zero (false, 0, 0s) and an override of zero.
func TestDefaultFillsOnlyAbsentFields(t *testing.T) {
	t.Run("absent", func(t *testing.T) {
		cfg, err := compileDefaults(t, "items:\n  - name: a\n", nil)
		if err != nil {
			t.Fatal(err)
		}
		if !cfg.Enabled || cfg.Rate != 10 || cfg.Timeout != 30*time.Second || cfg.Tokens != 16 || cfg.Ratio != 0.5 || cfg.Nested.Level != "info" {
			t.Errorf("defaults not applied: %+v", cfg)
		}
		if cfg.Limit == nil || *cfg.Limit != 5 {
			t.Errorf("pointer default: got %v, want 5", cfg.Limit)
		}
		if cfg.Items[0].Weight != 3 {
			t.Errorf("list element default: got %d, want 3", cfg.Items[0].Weight)
		}
	})
	t.Run("explicit zero", func(t *testing.T) {
		cfg, err := compileDefaults(t, "enabled: false\nrate: 0\ntimeout: 0s\nlimit: 0\nratio: 0\nnested:\n  level: \"\"\nitems:\n  - name: a\n    weight: 0\n", nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Enabled || cfg.Rate != 0 || cfg.Timeout != 0 || cfg.Ratio != 0 || cfg.Nested.Level != "" || cfg.Items[0].Weight != 0 {
			t.Errorf("an explicit zero was replaced by a default: %+v", cfg)
		}
		if cfg.Limit == nil || *cfg.Limit != 0 {
			t.Errorf("pointer: got %v, want 0", cfg.Limit)
		}
	})
	t.Run("env zero", func(t *testing.T) {
		cfg, err := compileDefaults(t, "", map[string]string{"TEST_DEFAULTS_RATE": "0"})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Rate != 0 {
			t.Errorf("rate = %d, want the environment's 0", cfg.Rate)
		}
	})
	t.Run("override zero", func(t *testing.T) {
		cfg, err := compileDefaults(t, "rate: 7\n", map[string]string{"TEST_DEFAULTS_RATE": "8"}, func(c *defaultsConfig) { c.Rate = 0; c.Enabled = false })
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Rate != 0 || cfg.Enabled {
			t.Errorf("rate = %d enabled = %v, want the override's 0 and false", cfg.Rate, cfg.Enabled)
		}
	})
	t.Run("pointer null", func(t *testing.T) {
		cfg, err := compileDefaults(t, "limit: null\n", nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Limit != nil {
			t.Errorf("limit = %d, want nil: null on a pointer is explicit", *cfg.Limit)
		}
	})
}

// TestExplicitValueIsValidated: an explicit value that breaks a rule is
// invalid with its path, where the default used to hide it.
func TestExplicitValueIsValidated(t *testing.T) {
	_, err := compileDefaults(t, "tokens: 0\n", nil)
	var e *Error
	if !errors.As(err, &e) || e.Reason != ReasonValidation {
		t.Fatalf("err = %v, want %s", err, ReasonValidation)
	}
	if len(e.Problems) != 1 || e.Problems[0].Path != "tokens" || e.Problems[0].Line != 1 {
		t.Errorf("problems = %v, want tokens at line 1", e.Problems)
	}
}

// TestNullOnNonPointerIsMismatch: `key: null` is not "absent".
func TestNullOnNonPointerIsMismatch(t *testing.T) {
	for _, src := range []string{"rate: null\n", "enabled: ~\n", "timeout:\n", "nested: null\n", "items:\n  - name: a\n    weight: null\n"} {
		_, err := compileDefaults(t, src, nil)
		var e *Error
		if !errors.As(err, &e) || e.Reason != ReasonFieldType {
			t.Errorf("%q: err = %v, want %s", src, err, ReasonFieldType)
			continue
		}
		if e.Problems[0].Line == 0 || e.Problems[0].Path == "" {
			t.Errorf("%q: problem %v lacks a path or a line", src, e.Problems[0])
		}
	}
	// A list or a map may be null: it holds nothing.
	if _, err := compileDefaults(t, "items:\n", nil); err != nil {
		t.Errorf("null list: %v", err)
	}
}
