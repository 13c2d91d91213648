//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// exampleConfig reads the repository's examples/local-stub.yaml, the
// configuration every follower runs.
func exampleConfig() ([]byte, error) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/reconfhq/reconf").Output()
	if err != nil {
		return nil, fmt.Errorf("finding the repository: %w", err)
	}
	return os.ReadFile(filepath.Join(strings.TrimSpace(string(root)), "examples", "local-stub.yaml"))
}

// variants returns the two documents the reloads alternate: the example
// grown to at least size bytes, once with routing.max_attempts 2 and once
// with 3, so that every reload publishes a new version.
//
// A configuration grows by backends (stub backends with no concurrency
// limit, so no fleet-wide gate is involved) and one model alias for each,
// about 110 bytes per backend: a 1 MB file holds some 9,000 backends and
// as many aliases, the shape of a large gateway.
//
// Without gate, every backend's max_concurrency is set to 0 (unlimited), so
// that the fleet-wide concurrency gate holds its lease but moves no slots:
// with limits, every worker watches every other worker's claims on each
// limited backend, which is the gate's cost, not propagation's.
func variants(example []byte, size int, gate bool) ([2][]byte, error) {
	const from, to = "max_attempts: 2", "max_attempts: 3"
	if !bytes.Contains(example, []byte(from)) || !bytes.Contains(example, []byte("\nmodel_aliases:")) {
		return [2][]byte{}, errors.New("examples/local-stub.yaml no longer has routing.max_attempts: 2 and a final model_aliases section")
	}
	if !gate {
		example = limitRe.ReplaceAll(example, []byte("${1}0"))
	}
	a := grow(example, size)
	return [2][]byte{a, bytes.Replace(a, []byte(from), []byte(to), 1)}, nil
}

var limitRe = regexp.MustCompile(`(?m)^(\s*max_concurrency:\s*)\d+`)

// withKeys turns on api_keys authentication with n named client keys, each
// with a fleet-wide request and token limit, so that every worker runs
// the key limiter's fleet loop (its reports and its sleep at rest). A
// fleet's secrets travel as references, so each key's secret is an
// environment variable, FLEETSIM_KEY_<k>, which the caller sets.
func withKeys(example []byte, n int) ([]byte, error) {
	const auth = "auth:\n  mode: none"
	i := bytes.Index(example, []byte(auth))
	if i < 0 {
		return nil, errors.New("examples/local-stub.yaml no longer starts its auth section with mode: none")
	}
	end := bytes.Index(example[i:], []byte("\nlimits:"))
	if end < 0 {
		return nil, errors.New("examples/local-stub.yaml no longer has a limits section after auth")
	}
	var keys bytes.Buffer
	keys.WriteString("auth:\n  mode: api_keys\n  keys:\n")
	for k := range n {
		fmt.Fprintf(&keys, "    - name: fleet-key-%03d\n      secret: ${env:%s}\n      limits: { requests: 6000, tokens: 1000000, per: 1m }\n", k, keyEnv(k))
	}
	var out bytes.Buffer
	out.Write(example[:i])
	out.Write(bytes.TrimSuffix(keys.Bytes(), []byte("\n")))
	out.Write(example[i+end:])
	return out.Bytes(), nil
}

func grow(example []byte, size int) []byte {
	if len(example) >= size {
		return example
	}
	head, tail, _ := bytes.Cut(example, []byte("\nmodel_aliases:"))
	var backends, aliases bytes.Buffer
	for i := 0; len(example)+backends.Len()+aliases.Len() < size; i++ {
		fmt.Fprintf(&backends, "  - name: fleet-%06d\n    kind: stub\n    model: fleet-model-%06d\n    timeout: 30s\n", i, i)
		fmt.Fprintf(&aliases, "  fleet-alias-%06d: fleet-%06d\n", i, i)
	}
	var out bytes.Buffer
	out.Write(head)
	out.WriteString("\n")
	out.Write(backends.Bytes())
	out.WriteString("model_aliases:")
	out.Write(tail)
	if !bytes.HasSuffix(tail, []byte("\n")) {
		out.WriteString("\n")
	}
	out.Write(aliases.Bytes())
	return out.Bytes()
}

// writeAtomic replaces path with data by a rename, as an operator must
// (an in-place rewrite is refused as source_non_atomic_update).
func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// keyEnv names the environment variable holding client key k's secret.
func keyEnv(k int) string { return fmt.Sprintf("FLEETSIM_KEY_%03d", k) }
