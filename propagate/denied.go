package propagate

import (
	"errors"
	"fmt"

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

// grantsNeeded names the grants a fleet's etcd user needs under prefix.
// etcd allows a range read or a watch only if the user's grants cover the
// whole range, so grants on the two keys of the record's range do not
// cover it: the keys between them are not granted.
func grantsNeeded(prefix string) string {
	return fmt.Sprintf("etcd refused this worker's user (permission denied); a fleet's etcd user needs read and write on the range from %[1]s/config to %[1]s/config/by\\x00 (the record and its witness, watched as one range: grants on the two keys alone do not cover it), on the prefixes %[1]s/workers/, %[1]s/hosts/ and %[1]s/history/, and on whatever else the application keeps under %[1]s/; one grant on the prefix %[1]s/ covers them all", prefix)
}
