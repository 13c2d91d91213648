//go:build linux

package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reconfhq/reconf/internal/etcdproc"
)

func TestMain(m *testing.M) {
	if code, ok := etcdproc.RunIfChild(); ok { // this test binary re-executed as the etcd member
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}

// TestFleetSmoke runs ten whole reconfd workers behind a publisher on one
// etcd member in a child process: every reload must reach every follower,
// and each figure of the JSON line must have been measured, in both modes.
// It costs 14 to 27 s with -race on the shared 2-core machine under a load
// average of 24 (the etcd member is the race-built test binary too); CI
// runs it in -short mode.
func TestFleetSmoke(t *testing.T) {
	example, err := exampleConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{modeGateway, modeRuntime} {
		t.Run(mode, func(t *testing.T) {
			c := config{followers: 10, mode: mode, clients: 3, reloads: 5, warmup: 1, interval: 5 * time.Millisecond, idle: 200 * time.Millisecond, settle: 100 * time.Millisecond, timeout: 20 * time.Second}
			res, err := run(context.Background(), c, example)
			if err != nil {
				t.Fatal(err)
			}
			if res.Unconverged != 0 || res.FailedApplies != 0 || res.RowsBehind != 0 {
				t.Fatalf("got %d unconverged reloads, %d failed applies (%s) and %d reloads whose rows lagged, want none", res.Unconverged, res.FailedApplies, res.FirstFailureReason, res.RowsBehind)
			}
			if res.RowsP50 <= 0 || res.RowsP99 < res.RowsP50 {
				t.Errorf("rows reached every version in p50 %.1f ms, p99 %.1f ms: not measured", res.RowsP50, res.RowsP99)
			}
			if res.IdleWritesPerS != 0 {
				t.Errorf("the fleet wrote %.1f times a second at rest, want 0 (rows and host records live on leases)", res.IdleWritesPerS)
			}
			if res.P50 <= 0 || res.Max < res.P99 || res.ApplyP50 <= 0 || res.RecordBytes == 0 || res.WirePerReload <= 0 || res.EtcdRSS <= 0 || res.ProcessRSS <= 0 || res.IdleSwitches <= 0 {
				t.Errorf("a figure was not measured: %+v", res)
			}
		})
	}
}

// TestVariantsGrow checks that a configuration grows to the size asked and
// that the two variants differ in one live field only.
func TestVariantsGrow(t *testing.T) {
	example, err := exampleConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{0, 10_000, 200_000} {
		docs, err := variants(example, size, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(docs[0]) < size || len(docs[0]) > size+200 && size > 0 {
			t.Errorf("size %d: got %d bytes", size, len(docs[0]))
		}
		if string(docs[0]) == string(docs[1]) || len(docs[0]) != len(docs[1]) {
			t.Errorf("size %d: the variants must differ in max_attempts alone", size)
		}
	}
}

// TestGRPCMessages reads etcd's per-method message counters by name.
func TestGRPCMessages(t *testing.T) {
	for _, c := range []struct{ line, dir, method string }{
		{`grpc_server_msg_received_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"}`, "recv", "LeaseKeepAlive"},
		{`grpc_server_msg_sent_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"}`, "sent", "Watch"},
		{`grpc_server_handled_total{grpc_code="OK",grpc_method="Txn"}`, "", ""},
		{`grpc_server_msg_sent_total`, "", ""},
	} {
		dir, method, ok := grpcMessages(c.line)
		if dir != c.dir || method != c.method || ok != (c.dir != "") {
			t.Errorf("%s: got %q %q %v, want %q %q", c.line, dir, method, ok, c.dir, c.method)
		}
	}
}

// TestWithKeys turns authentication on with the keys asked, each secret a
// reference, and keeps the variants' one live difference.
func TestWithKeys(t *testing.T) {
	example, err := exampleConfig()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := withKeys(example, 3)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	if !strings.Contains(s, "\n  mode: api_keys\n") || strings.Count(s, "- name: fleet-key-") != 3 || strings.Count(s, "${env:FLEETSIM_KEY_") != 3 || strings.Contains(s, "mode: none") {
		t.Errorf("the keyed configuration lacks its keys:\n%s", s)
	}
	if _, err := variants(doc, 0, false); err != nil {
		t.Error(err)
	}
}
