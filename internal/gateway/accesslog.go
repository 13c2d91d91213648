package gateway

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/reconfhq/reconf"
)

// accessLogs is the process's access log, which
// observability.access_log sets at each commit: nil while it is off, so
// that a request pays one atomic load for it.
type accessLogs struct {
	cur    atomic.Pointer[accessLog]
	dir    string    // the configuration file's directory, for a relative destination
	stderr io.Writer // what "stderr" means (WithLogOutput's writer)
}

// accessLog is one destination: a line is built in buf and written with
// one Write, under mu, so lines from concurrent requests never interleave.
type accessLog struct {
	dest   string // the destination as configured
	w      io.Writer
	f      *os.File // the file, or nil for stderr
	mu     sync.Mutex
	buf    []byte
	closed bool
}

// consumer makes observability.access_log live: a reload turns it on or
// off, and one that changes the destination opens the new file in
// Prepare (a file that cannot be opened refuses the reload) and closes
// the old one after the swap.
func (a *accessLogs) consumer() reconf.Consumer[Config] {
	return reconf.ConsumerFunc[Config](func(_ context.Context, _, next *Config) (reconf.Prepared, error) {
		c := next.Observability.AccessLog
		old := a.cur.Load()
		if !c.Enabled {
			return &reconf.Staged{OnCommit: func() { a.swap(nil) }}, nil
		}
		if old != nil && old.dest == c.Destination {
			return &reconf.Staged{}, nil
		}
		l := &accessLog{dest: c.Destination, w: a.stderr}
		if c.Destination != "stderr" {
			path := c.Destination
			if !filepath.IsAbs(path) {
				path = filepath.Join(a.dir, path)
			}
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err != nil {
				return nil, reconf.FieldErrorf("observability.access_log.destination", "cannot be opened for appending: %v", err)
			}
			l.w, l.f = f, f
		}
		return &reconf.Staged{OnCommit: func() { a.swap(l) }, OnAbort: l.close}, nil
	})
}

// swap makes l the access log and closes the one it replaces.
func (a *accessLogs) swap(l *accessLog) {
	if old := a.cur.Swap(l); old != nil && old != l {
		old.close()
	}
}

// close closes the log's file; a request still holding it writes nothing.
func (l *accessLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.f != nil {
		_ = l.f.Close()
	}
}

// write writes the request's line: what it asked for and how it went,
// never a secret, a prompt or a body. A write that fails is dropped: the
// log never holds a request back.
func (l *accessLog) write(x *exchange, gen uint64, status int, took time.Duration, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	b := append(l.buf[:0], `{"`+logTime+`":"`...)
	b = now.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","`+logRequestID+`":`...)
	b = appendJSONString(b, x.id())
	b = append(b, `,"`+logMethod+`":`...)
	b = appendJSONString(b, x.ctx.Method())
	b = append(b, `,"`+logPath+`":`...)
	b = appendJSONString(b, x.ctx.Path())
	if x.obs.op != "" {
		b = append(b, `,"`+logModel+`":`...)
		m := x.obs.model
		if len(m) == 0 && x.rt != nil {
			b = appendJSONString(b, x.rt.model)
		} else {
			b = appendJSONString(b, m)
		}
	}
	if x.backend != "" {
		b = append(b, `,"`+logBackend+`":`...)
		b = appendJSONString(b, x.backend)
	}
	b = append(b, `,"`+logStatus+`":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"`+logDuration+`":`...)
	b = strconv.AppendFloat(b, float64(took.Microseconds())/1000, 'f', -1, 64)
	if x.obs.usage {
		b = append(b, `,"`+logInput+`":`...)
		b = strconv.AppendInt(b, x.obs.in, 10)
		b = append(b, `,"`+logOutput+`":`...)
		b = strconv.AppendInt(b, x.obs.out, 10)
		if x.obs.estimated {
			b = append(b, `,"`+logEstimated+`":true`...)
		}
	}
	b = append(b, `,"`+logGeneration+`":`...)
	b = strconv.AppendUint(b, gen, 10)
	if x.client != nil {
		b = append(b, `,"`+logClientKey+`":`...)
		b = appendJSONString(b, x.client.name)
	}
	b = append(b, "}\n"...)
	l.buf = b
	_, _ = l.w.Write(b)
}

// logUnread writes the access log's line of a request that could not be
// read whole (requestError answered it, and no handler ran): gen is the
// active generation's.
func (g *Gateway) logUnread(x *exchange, gen uint64) {
	if l := g.access.cur.Load(); l != nil {
		now := time.Now()
		l.write(x, gen, x.ctx.Response.StatusCode(), now.Sub(x.ctx.Time()), now)
	}
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced.
func appendJSONString[S ~string | ~[]byte](b []byte, s S) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}
