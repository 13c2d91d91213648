package testetcd

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Role is an etcd role and the ranges it may use.
type Role struct {
	Name   string
	Ranges []Range
}

// Range is a permission of a Role: on the keys from Key to End, or on Key
// alone when End is empty; read and write unless ReadOnly.
type Range struct {
	Key, End string
	ReadOnly bool
}

// User is an etcd user with a password and the roles granted to it.
type User struct {
	Name, Password string
	Roles          []string
}

// Prefix is read and write on every key under p.
func Prefix(p string) Range { return Range{Key: p, End: clientv3.GetPrefixRangeEnd(p)} }

// EnableAuth turns on authentication in the cluster at endpoints, after
// adding roles, users and the root user (without a password, so that only
// the users given can log in), and fails t on any refusal. A test of
// refused joins builds its users with it rather than step by step.
func EnableAuth(t testing.TB, endpoints []string, roles []Role, users []User) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("testetcd: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	must := func(_ any, err error) {
		if err != nil {
			t.Helper()
			t.Fatalf("testetcd: enabling authentication: %v", err)
		}
	}
	must(cli.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}))
	must(cli.UserGrantRole(ctx, "root", "root"))
	for _, r := range roles {
		must(cli.RoleAdd(ctx, r.Name))
		for _, kr := range r.Ranges {
			perm := clientv3.PermissionType(clientv3.PermReadWrite)
			if kr.ReadOnly {
				perm = clientv3.PermissionType(clientv3.PermRead)
			}
			must(cli.RoleGrantPermission(ctx, r.Name, kr.Key, kr.End, perm))
		}
	}
	for _, u := range users {
		must(cli.UserAdd(ctx, u.Name, u.Password))
		for _, r := range u.Roles {
			must(cli.UserGrantRole(ctx, u.Name, r))
		}
	}
	must(cli.AuthEnable(ctx))
}
