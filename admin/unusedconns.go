package admin

import (
	"net"
	"net/http"
	"sync"
)

// unusedConns lets Shutdown close at once the connections that have not
// yet delivered a whole request. net/http counts such a connection idle
// only once it is five seconds old, so one client that connected and said
// nothing held every shutdown (and with it a restart's hand-over) for up
// to five seconds; and a request whose headers arrive after Shutdown began
// is dropped unanswered by net/http anyway. Closing them loses nothing,
// and requests already being answered are waited for as before.
type unusedConns struct {
	mu     sync.Mutex
	fresh  map[net.Conn]struct{} // in http.StateNew
	closed bool                  // Shutdown began: a new connection is closed
}

// track is the server's ConnState hook.
func (u *unusedConns) track(c net.Conn, st http.ConnState) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if st != http.StateNew {
		delete(u.fresh, c)
		return
	}
	if u.closed {
		_ = c.Close()
		return
	}
	if u.fresh == nil {
		u.fresh = make(map[net.Conn]struct{})
	}
	u.fresh[c] = struct{}{}
}

// closeUnused closes every connection without a whole request yet, and
// every one accepted from now on.
func (u *unusedConns) closeUnused() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	for c := range u.fresh {
		_ = c.Close()
		delete(u.fresh, c)
	}
}
