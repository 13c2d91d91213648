package gateway

import (
	"bytes"
	"unicode/utf8"
)

// The top-level request fields the gateway reads, one list per endpoint.
// A request body is one canonical object as to these fields: each is
// given at most once, and under its exact name. A key that an upstream
// decoding the way Go's encoding/json does would take for one of them (it
// matches a key to a field after unescaping it, exactly or else ignoring
// case as bytes.EqualFold does, and the last such key wins) but that the
// gateway would not, is refused with codeAmbiguousKey: otherwise a client
// could send "Model" or "Messages" past the backend's model and system
// prompt to such an upstream. An endpoint that reads a new field adds it
// to its list here; the scan and the walk of a body read the list.
var (
	// chatFieldNames are chat completions' fields, in the order of the
	// field* constants.
	chatFieldNames = [...]string{"model", "stream", "messages", "stream_options"}
	chatFields     = fieldList(chatFieldNames[:])

	// streamOptionFields are the fields of a chat completion's
	// stream_options that the gateway reads.
	streamOptionFields = fieldList{"include_usage"}

	// embeddingsFields are /v1/embeddings' fields, in the order of the
	// emb* constants.
	embeddingsFields = fieldList{"model", "input", "encoding_format", "dimensions"}

	// responsesFields are /v1/responses' fields, in the order of the
	// resp* constants: those it forwards edited, and the stateful
	// options it refuses.
	responsesFields = fieldList{"model", "input", "stream", "previous_response_id", "store", "background", "conversation"}

	// messagesFields are /v1/messages' fields, in the order of the msg*
	// constants: those every backend kind reads, then those the
	// translation to a chat completion reads (or refuses).
	messagesFields = fieldList{"model", "messages", "system", "stream", "max_tokens",
		"stop_sequences", "temperature", "top_p", "top_k", "metadata", "tools", "tool_choice", "thinking"}
)

// fieldList is the names of the fields an endpoint reads, each ASCII.
type fieldList []string

// exact is the index of the field named key exactly (key is unescaped),
// or -1.
func (l fieldList) exact(key []byte) int {
	for i, n := range l {
		if string(key) == n {
			return i
		}
	}
	return -1
}

// folded is the index of the field that key (unescaped) names under
// encoding/json's case folding but not exactly, or -1. The folding is
// bytes.EqualFold's, as encoding/json's foldName is defined to match
// (Unicode simple folding, so "ſ" (U+017F) is an "s" and the Kelvin sign
// (U+212A) a "k"). An ASCII key is compared only with the names of its
// length, letter by letter; it does not allocate.
func (l fieldList) folded(key []byte) int {
	ascii := true
	for _, c := range key {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	for i, n := range l {
		if ascii && len(key) != len(n) || !ascii && len(key) < len(n) {
			// Every rune that folds to an ASCII letter is at least one
			// byte long.
			continue
		}
		if string(key) == n {
			return -1
		}
		if ascii && asciiEqualFold(key, n) || !ascii && equalFoldString(key, n) {
			return i
		}
	}
	return -1
}

// asciiEqualFold reports whether the ASCII key and name, of one length,
// are equal ignoring the case of letters.
func asciiEqualFold(key []byte, name string) bool {
	for i := range len(key) {
		a, b := key[i], name[i]
		if a == b {
			continue
		}
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// equalFoldString is bytes.EqualFold(key, []byte(name)) without the
// conversion's allocation: a field name is short, so it is copied to the
// stack.
func equalFoldString(key []byte, name string) bool {
	var buf [32]byte
	if len(name) > len(buf) {
		return bytes.EqualFold(key, []byte(name))
	}
	n := copy(buf[:], name)
	return bytes.EqualFold(key, buf[:n])
}
