package propagate

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// On an external cluster with authentication, a fleet reads and writes its
// keys as one etcd user. A request that user may not make fails with
// permission denied, which no retry cures until the operator changes the
// grants; the error says which grants, rather than only that the channel
// was unreachable (the record's witness made the record's watch one
// range, which grants on the record's key alone no longer cover).

// permissionDenied reports whether etcd refused a request to the client's
// user. A refused watch ends with the text of the gRPC error alone
// (clientv3 keeps a watch's cancel reason as a string).
func permissionDenied(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || (err != nil && err.Error() == rpctypes.ErrGRPCPermissionDenied.Error())
}

// WithGrantPrefixes names the key prefixes the application writes under
// the channel's prefix beside the channel's own (reconfd: its concurrency
// gate's claims, its backends' cooldowns, its client keys' use). etcd
// refusing the worker's user a request then names them among the grants a
// fleet's user needs, so the operator grants every one at once instead of
// meeting the next refusal after the first is fixed.
func WithGrantPrefixes(prefixes ...string) ChannelOption {
	return func(c *Channel) { c.appPrefixes = slices.Clone(prefixes) }
}

// channelPrefixes are the prefixes under P that the channel itself writes
// beside the record and its witness: rows, host records, the history, a
// rollout's state and the records' copies.
var channelPrefixes = []string{"workers/", "hosts/", "history/", "rollout/", "records/"}

// grantsNeeded names the grants a fleet's etcd user needs under prefix,
// with app the application's own prefixes (WithGrantPrefixes). etcd
// allows a range read or a watch only if the user's grants cover the
// whole range, so grants on the two keys of the record's range do not
// cover it: the keys between them are not granted.
func grantsNeeded(prefix string, app []string) string {
	own := make([]string, len(channelPrefixes))
	for i, p := range channelPrefixes {
		own[i] = prefix + "/" + p
	}
	rest := fmt.Sprintf("on the prefixes %s, and on whatever else the application keeps under %s/", strings.Join(own, ", "), prefix)
	if len(app) > 0 {
		rest = fmt.Sprintf("on the channel's prefixes %s, and on the application's %s", strings.Join(own, ", "), strings.Join(app, ", "))
	}
	return fmt.Sprintf("etcd refused this worker's user (permission denied); a fleet's etcd user needs read and write on the range from %[1]s/config to %[1]s/config/by\\x00 (the record and its witness, watched as one range: grants on the two keys alone do not cover it), %[2]s; one grant on the prefix %[1]s/ covers them all", prefix, rest)
}

// grantsNeeded is grantsNeeded for the channel's prefix and the
// application's.
func (c *Channel) grantsNeeded() string { return grantsNeeded(c.prefix, c.appPrefixes) }
