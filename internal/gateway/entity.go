package gateway

import (
	"net"
	"unsafe"

	"github.com/reconfhq/reconf"
)

// entityKeyBytes is how much of a client key's SHA-256 digest names its
// client in a rollout's split: a stable id, the same in every process,
// that tells nothing of the key.
const entityKeyBytes = 8

// acquire pins the generation that serves the exchange's request. Every
// endpoint is served under this pin: without a rollout it is the active
// generation; during one, the generation the request's entity falls on
// (reconf.Runtime.AcquireFor), so one client sees one generation for
// the whole rollout, on every worker. The entity is, in order:
//   - the client key, in auth mode api_keys: the first 8 bytes of its
//     SHA-256 digest (never the key; the digest is kept for the key's
//     check, so a request digests its key once, and a kept-alive
//     connection once for all its requests);
//   - the value of rollout.entity_header, when configured and sent;
//   - the client's IP address.
//
// Without a rollout's split, the active generation is pinned and no
// entity is made. The choice reads the active generation's settings (the auth mode, the
// entity header): both are the same in the two generations of a rollout
// (the mode is restart-class, the header process-wide). It allocates
// nothing.
func (x *exchange) acquire() reconf.Pin[Config] {
	rt := x.g.rt
	if !rt.Splitting() {
		// No entity is needed: a kept-alive connection's key is then
		// let in by its memo with no digest at all.
		return rt.Acquire()
	}
	cur := rt.Current()
	h := &x.ctx.Request.Header
	if cur.Config().Auth.Mode == "api_keys" {
		if key := authorization(h); len(key) > 0 {
			x.memo().digestOf(key, &x.digest)
			x.digested = true
			return rt.AcquireFor(unsafe.String(&x.digest[0], entityKeyBytes))
		}
	}
	if name := routesKey.Get(cur).entityHdr; name != nil {
		if v := h.PeekCanonical(name); len(v) > 0 {
			return rt.AcquireFor(unsafe.String(unsafe.SliceData(v), len(v)))
		}
	}
	ip := net.IP(nil)
	if a, ok := x.ctx.RemoteAddr().(*net.TCPAddr); ok {
		ip = a.IP
	}
	if v4 := ip.To4(); v4 != nil {
		ip = v4
	}
	if len(ip) == 0 {
		return rt.AcquireFor("")
	}
	return rt.AcquireFor(unsafe.String(&ip[0], len(ip)))
}
