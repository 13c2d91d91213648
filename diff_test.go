package reconf

// diffEntries merges two sorted canonical encodings into the changed
// paths. It is the test oracle for Diff: a second, independent way to the
// same answer (TestDiffAgreesWithEncoding).
func diffEntries(a, b []entry) []fieldChange {
	var out []fieldChange
	add := func(c fieldChange) {
		if n := len(out); n > 0 && out[n-1].Path == c.Path {
			return
		}
		out = append(out, c)
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j >= len(b) || (i < len(a) && a[i].path < b[j].path):
			add(fieldChange{a[i].path, a[i].class})
			i++
		case i >= len(a) || b[j].path < a[i].path:
			add(fieldChange{b[j].path, b[j].class})
			j++
		default:
			if a[i].val != b[j].val {
				c := b[j].class
				if a[i].class.requiresRestart() {
					c = a[i].class
				}
				add(fieldChange{b[j].path, c})
			}
			i++
			j++
		}
	}
	return out
}
