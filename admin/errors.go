package admin

import (
	"errors"
	"time"
)

// Sentinel errors of configuration and lifecycle. A service branches on them
// with errors.Is to decide whether management stays off quietly, stays off
// with a warning, or fails to start.
var (
	// ErrNotConfigured is returned by CheckAddress, Start and Serve when no
	// management address is set: management is opt-in and simply stays off.
	ErrNotConfigured = errors.New("admin: management is off: no management address is set")
	// ErrManagementDisabled is returned by CheckAddress, Start and Serve for a
	// non-loopback address without a token. Management stays off; the
	// service should log it as a warning and keep serving its data plane.
	ErrManagementDisabled = errors.New("admin: management is off: a non-loopback address requires a bearer token (" + EnvToken + ")")
	// ErrTokenTooShort is returned by CheckAddress and New for a token
	// shorter than MinTokenLength characters. Management refuses to start
	// rather than run with a guessable token. The token itself is never
	// part of the error.
	ErrTokenTooShort = errors.New("admin: management token is shorter than 16 characters")
	// ErrTokenWhitespace is returned by CheckAddress and New for a token
	// with leading or trailing whitespace (typically the newline of a file
	// it was read from): no client sends it, so management would refuse
	// every request. The token itself is never part of the error.
	ErrTokenWhitespace = errors.New("admin: management token has leading or trailing whitespace (a newline from the file it came from?); remove it")
	// ErrTokenFile is wrapped when the token file (EnvTokenFile) cannot be
	// used: missing, not a regular file, kept with a mode or owner that
	// others could use (see ReadTokenFile), oversize, empty or holding a
	// line that is not a token; or when both EnvToken and EnvTokenFile
	// are set. Management does not start, or a re-read keeps the tokens
	// it has.
	ErrTokenFile = errors.New("admin: management token file")
	// ErrTokenFileNotRegular is wrapped, with ErrTokenFile, when the token
	// file is not a regular file after symlinks (a FIFO, a device, a
	// directory, a /proc file).
	ErrTokenFileNotRegular = errors.New("not a regular file")
	// ErrTokenFileWritable is wrapped, with ErrTokenFile, when the token
	// file (after symlinks) may be written by its group or by others.
	ErrTokenFileWritable = errors.New("writable by group or others")
	// ErrTokenFileReadable is wrapped, with ErrTokenFile, when others may
	// read the token file (group read is allowed).
	ErrTokenFileReadable = errors.New("readable by others")
	// ErrTokenFileOwner is wrapped, with ErrTokenFile, when the token file
	// belongs to neither this process's user nor root.
	ErrTokenFileOwner = errors.New("owned by neither this user nor root")
	// ErrTLS is wrapped when the management listener's TLS files cannot
	// be used (missing, not a regular file, a certificate that does not
	// parse, does not match its key or has expired, a CA file without a
	// certificate) or its settings do not fit together. The error names
	// the file, never its content.
	ErrTLS = errors.New("admin: management TLS")
	// ErrBadAddress is wrapped when a management address is not host:port.
	ErrBadAddress = errors.New("admin: management address must be host:port")
	// ErrBadOrigin is wrapped by New when an allowed origin is not of the
	// form scheme://host[:port].
	ErrBadOrigin = errors.New("admin: allowed origin must be scheme://host[:port]")
	// ErrStarted is returned by Start and Serve on a server already serving.
	ErrStarted = errors.New("admin: server already started")
	// ErrClosed is returned by Start and Serve after Shutdown.
	ErrClosed = errors.New("admin: server closed")
)

// Reasons of the management API's own answers: the "reason" in the JSON
// error body {"error": {"reason": ..., "message": ...}}. Like reconf's
// attempt reasons they are a stable contract that scripts may match on;
// messages may change.
const (
	// ReasonUnauthorized (401): the bearer token is missing or wrong.
	ReasonUnauthorized = "unauthorized"
	// ReasonHostNotAllowed (403): on a loopback listener, the Host header
	// names neither a loopback host nor an allowed origin's host (a DNS
	// rebinding defence).
	ReasonHostNotAllowed = "host_not_allowed"
	// ReasonOriginNotAllowed (403): a non-empty Origin not on the allowlist.
	ReasonOriginNotAllowed = "origin_not_allowed"
	// ReasonCrossSite (403): Sec-Fetch-Site is cross-site.
	ReasonCrossSite = "cross_site_request"
	// ReasonThrottled (429): too many failed authentications from this
	// client address (a wrong token, a failed login); the Retry-After
	// header says how many seconds to wait. A right token is never
	// throttled.
	ReasonThrottled = "authentication_throttled"
	// ReasonMethodNotAllowed (405): the method is not one the path serves.
	ReasonMethodNotAllowed = "method_not_allowed"
	// ReasonNotFound (404): no such management path, or no such restart id.
	ReasonNotFound = "not_found"
	// ReasonBodyRejected (400): the reload body is a JSON object with a key.
	// The only accepted bodies are empty and {}: configuration, paths, URLs
	// and commands can never be supplied through the API.
	ReasonBodyRejected = "request_body_rejected"
	// ReasonBodyMalformed (400): the reload body is not a JSON object.
	ReasonBodyMalformed = "request_body_malformed"
	// ReasonBodyTooLarge (413): the reload body is over MaxRequestBytes.
	ReasonBodyTooLarge = "request_body_too_large"
	// ReasonBodyUnreadable (400): the body could not be read (the client
	// was too slow or went away).
	ReasonBodyUnreadable = "request_body_unreadable"
	// ReasonAttemptPending (202): the attempt was accepted but did not end
	// within the reload wait; it carries on and its result shows in status.
	ReasonAttemptPending = "attempt_pending"
	// ReasonBadLimit (400): the history's limit parameter is not a
	// positive number.
	ReasonBadLimit = "bad_limit"
	// ReasonHistoryUnavailable (503): the history could not be read (in a
	// fleet: etcd did not answer).
	ReasonHistoryUnavailable = "history_unavailable"
	// ReasonBadWait (400): a restart's ?wait= is not a duration.
	ReasonBadWait = "bad_wait"
	// ReasonBadIfMatch (400): a reload's If-Match is not one quoted
	// "sha256:" digest of 64 hex digits.
	ReasonBadIfMatch = "bad_if_match"
	// ReasonInternal (500): a bug in the management API; see the service log.
	ReasonInternal = "internal_error"
)

// Request errors. They never leave the package: answer maps each to its
// status, reason and a fixed message that never repeats the request.
var (
	errUnauthorized       = errors.New("admin: missing or wrong bearer token")
	errThrottled          = errors.New("admin: too many failed authentications")
	errHostNotAllowed     = errors.New("admin: host not allowed")
	errOriginRefused      = errors.New("admin: origin not allowed")
	errCrossSite          = errors.New("admin: cross-site request")
	errMethod             = errors.New("admin: method not allowed")
	errNotFound           = errors.New("admin: not found")
	errRestartUnknown     = errors.New("admin: unknown restart id")
	errBodyRejected       = errors.New("admin: request body must be empty or {}")
	errBodyMalformed      = errors.New("admin: request body is not a JSON object")
	errBodyTooLarge       = errors.New("admin: request body too large")
	errBodyUnreadable     = errors.New("admin: request body unreadable")
	errPending            = errors.New("admin: attempt still running")
	errBadLimit           = errors.New("admin: bad history limit")
	errHistoryUnavailable = errors.New("admin: history unavailable")
	errBadWait            = errors.New("admin: bad wait parameter")
	errBadIfMatch         = errors.New("admin: bad If-Match")
)

// throttledError is errThrottled with the wait it announces.
type throttledError struct{ retryAfter time.Duration }

func (e *throttledError) Error() string        { return errThrottled.Error() }
func (e *throttledError) Is(target error) bool { return target == errThrottled }
