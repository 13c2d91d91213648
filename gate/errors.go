package gate

import "errors"

// ErrClosed is returned by Acquire on a limiter whose Gate was closed, and
// by the callers that were waiting in line when it closed.
var ErrClosed = errors.New("gate: closed")
