package gateway

import (
	"fmt"
	"strings"
	"time"

	"github.com/reconfhq/reconf/internal/redact"
)

// ReasonClusterUnreachable is the stable reason of a join that gave up:
// no member let the process in within the join's wait.
const ReasonClusterUnreachable = "cluster_unreachable"

// ClusterUnreachableError is a join that waited its whole bound for etcd
// without getting in: every member down, unreachable or without a leader,
// or too slow to answer. Unlike a *ClusterTLSError or a *ClusterAuthError
// it may pass, so the join waited for it first; its message names the
// endpoints, the wait and the last error met, so that an operator does not
// read a bare "context deadline exceeded".
type ClusterUnreachableError struct {
	// Endpoints are the etcd client URLs the process tried.
	Endpoints []string
	// Wait is how long the join waited.
	Wait time.Duration
	// Err is the last error the join met.
	Err error
}

// Error says what happened, with the stable reason in parentheses.
func (e *ClusterUnreachableError) Error() string {
	msg := fmt.Sprintf("etcd at %s did not let this process in within %v: every member down, unreachable, without a leader or too slow (%s)",
		redact.URLs(strings.Join(e.Endpoints, ",")), e.Wait, ReasonClusterUnreachable)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the last error the join met.
func (e *ClusterUnreachableError) Unwrap() error { return e.Err }
