package reconf

import (
	"strconv"

	"go.yaml.in/yaml/v3"
)

// An unknown key is reported by name only when it looks like a field name
// someone meant to write: a short identifier. Anything else (a line of a
// system file a config was symlinked to, a key that holds a token) is
// reported by its line and column alone, so an answer or a log line never
// carries content. A known field close to the name is offered as a hint.

// maxKeyName is the longest unknown key reported by name. The schema's own
// field names are far shorter; a longer key is more likely content.
const maxKeyName = 40

// plausibleKey reports whether s looks like a field name: a letter, then
// letters, digits, '_' or '-', at most maxKeyName bytes.
func plausibleKey(s string) bool {
	if s == "" || len(s) > maxKeyName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '_' || c == '-')) {
			return false
		}
	}
	return true
}

// unknownField records key k (text name), not a field of struct n. mark is
// where the parent's path ends in d.buf.
func (d *decoder) unknownField(n *node, k *yaml.Node, name string, mark int) {
	if len(d.unknown.list) >= maxListedProblems {
		d.unknown.n++
		return
	}
	if !plausibleKey(name) {
		d.buf = d.buf[:mark]
		d.problem(&d.unknown, k, string(d.buf), "unknown field; its key is not a field name (not shown)")
		return
	}
	d.buf = append(d.buf, name...)
	detail := "unknown field"
	if near := nearestField(n, name); near != "" {
		detail += "; did you mean " + strconv.Quote(near) + "?"
	}
	d.problem(&d.unknown, k, string(d.buf), detail)
}

// nearestField returns the field of n closest to name when one is close
// enough to be a likely typo (case and '-' for '_' aside, at most one edit
// for short names and two for longer ones), or "". Ties go to the first
// name in sorted order so that the hint is stable.
func nearestField(n *node, name string) string {
	limit := 1
	if len(name) > 5 {
		limit = 2
	}
	want := foldKey(name)
	best, bestD := "", limit
	for key, ref := range n.keys {
		if ref.n.own == classDerived {
			continue
		}
		// Distances below the bound are exact, so a tie is a real one.
		d := editDistance(want, foldKey(key), bestD+1)
		if d < bestD || d == bestD && (best == "" || key < best) {
			best, bestD = key, d
		}
	}
	return best
}

// foldKey lowers ASCII letters and writes '-' as '_', the two slips a
// hint should see through.
func foldKey(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c == '-':
			b[i] = '_'
		}
	}
	return string(b)
}

// editDistance returns the optimal string alignment distance between a and
// b (insertions, deletions, substitutions and swaps of neighbours), or a
// value of at least bound once the distance is known to reach it.
func editDistance(a, b string, bound int) int {
	if d := len(a) - len(b); d >= bound || -d >= bound {
		return bound
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, prev2[j-2]+1)
			}
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		if rowMin >= bound {
			return bound
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
