package gateway

import (
	"encoding/binary"
	"math/bits"
)

// maxJSONDepth is encoding/json's nesting limit, which validJSON keeps so
// that both accept the same bodies.
const maxJSONDepth = 10000

// shallowJSONDepth is the nesting scanJSON tracks before it makes room
// for maxJSONDepth.
const shallowJSONDepth = 128

// validJSON reports whether b is exactly one JSON value with optional
// white space around it: what json.Valid reports (the same grammar, no
// UTF-8 check inside strings, the same nesting limit; FuzzValidJSON
// compares the two). It exists because json.Valid runs its state machine
// through a function call per byte, 1.4% of a worker's CPU on a chat
// completion body; this scan is a loop over the bytes. It does not
// allocate.
func validJSON(b []byte) bool { return scanJSON(b, nil) }

// scanJSON is validJSON that, when t is not nil, also records in t what
// parseChat reads of a top-level object on the way (see chatScan), so a
// chat completion's body is walked once.
func scanJSON(b []byte, t *chatScan) bool {
	// Bit d of objects: the container at depth d is an object. Bodies
	// nest a few levels, so the bits start in a small array (zeroing
	// room for encoding/json's whole limit cost every request more than
	// the rest of the scan's bookkeeping) and move to a whole one only
	// past it.
	var shallow [shallowJSONDepth / 64]uint64
	objects := shallow[:]
	depth := 0
	i := skipSpace(b, 0)
	for {
		// A value starts at i.
		if i >= len(b) {
			return false
		}
		if t != nil && depth == 2 && t.inMessages {
			t.message(b[i])
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if depth == maxJSONDepth {
				return false
			}
			if depth == len(objects)*64 {
				var deep [maxJSONDepth/64 + 1]uint64
				copy(deep[:], objects)
				objects = deep[:]
			}
			if c == '{' {
				objects[depth/64] |= 1 << (depth % 64)
			} else {
				objects[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			i = skipSpace(b, i+1)
			if i < len(b) && (b[i] == '}' && c == '{' || b[i] == ']' && c == '[') {
				depth--
				i++
				break
			}
			if c == '{' {
				k := i
				if i = objectKey(b, i); i < 0 {
					return false
				}
				if t != nil && depth == 1 {
					t.member(b, k, i)
				}
			}
			continue
		case c == '"':
			if i = scanJSONString(b, i); i < 0 {
				return false
			}
		case c == '-' || c >= '0' && c <= '9':
			if i = scanJSONNumber(b, i); i < 0 {
				return false
			}
		case c == 't':
			if i = literal(b, i, "true"); i < 0 {
				return false
			}
		case c == 'f':
			if i = literal(b, i, "false"); i < 0 {
				return false
			}
		case c == 'n':
			if i = literal(b, i, "null"); i < 0 {
				return false
			}
		default:
			return false
		}
		// A value ended at i: close containers, or go on to the next
		// element or member.
		for {
			if t != nil && depth == 1 {
				t.valueEnd(i)
			}
			i = skipSpace(b, i)
			if depth == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			inObject := objects[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
				if inObject {
					k := i
					if i = objectKey(b, i); i < 0 {
						return false
					}
					if t != nil && depth == 1 {
						t.member(b, k, i)
					}
				}
			case '}', ']':
				if (b[i] == '}') != inObject {
					return false
				}
				depth--
				i++
				continue
			default:
				return false
			}
			break
		}
	}
}

// objectKey scans a member's key and colon at i; it returns the index of
// the member's value, or -1.
func objectKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = scanJSONString(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// scanJSONString returns the index just past the string whose quote is at
// i, or -1 when it is not a valid JSON string.
func scanJSONString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		if i = nextStringStop(b, i); i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// nextStringStop returns the index of the first byte from i on that a
// string scan must look at (a quote, a backslash or a byte below 0x20), or
// where the last whole word ends if none is there; the caller looks at the
// few bytes left one at a time. Eight bytes at a time: a chat body is
// mostly string content, and a byte at a time was 3% of a proxied
// request's instructions (callgrind).
func nextStringStop(b []byte, i int) int {
	for i+8 <= len(b) {
		if m := stringStops(binary.LittleEndian.Uint64(b[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
		i += 8
	}
	return i
}

// stringStops returns a word with the high bit set in the lowest byte of v
// (read little-endian) that is a quote, a backslash or below 0x20, and
// possibly in bytes above that one; 0 when no byte is any of them. Each
// test is the classic "has a zero byte" trick, which is exact in its
// lowest flagged byte.
func stringStops(v uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q := v ^ (ones * '"')
	s := v ^ (ones * '\\')
	return ((q-ones)&^q | (s-ones)&^s | (v-ones*0x20)&^v) & highs
}

// scanJSONNumber returns the index just past the number at i, or -1.
func scanJSONNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if j := digits(b, i); j > i {
			i = j
		} else {
			return -1
		}
	}
	return i
}

// digits returns the index of the first byte at or after i that is not a
// decimal digit.
func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// literal returns the index past word at i, or -1 when b does not hold it
// there.
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}
