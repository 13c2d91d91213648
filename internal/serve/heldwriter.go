package serve

import (
	"io"
	"sync"
)

// heldWriter holds what is written to it until release (write it out,
// then pass everything through) or discard (drop it, then pass through).
type heldWriter struct {
	mu   sync.Mutex
	w    io.Writer
	buf  []byte
	held bool
}

func (h *heldWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	return h.w.Write(p)
}

func (h *heldWriter) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held && len(h.buf) > 0 {
		_, _ = h.w.Write(h.buf)
	}
	h.held, h.buf = false, nil
}

func (h *heldWriter) discard() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held, h.buf = false, nil
}
