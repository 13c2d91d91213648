// Command intruder is the e2e tests' hostile local user: run as another
// user (nobody), it tries to reach a fleet's etcd channel and to write the
// configuration key, and prints what happened as one JSON object. It is
// built and run by e2e tests only.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// report is what the intruder saw.
type report struct {
	UID       int    `json:"uid"`
	Dial      string `json:"dial"`       // "ok" or the error of a plain connect to the endpoint
	DialPerm  bool   `json:"dial_perm"`  // the connect was refused for permission (EACCES)
	Write     string `json:"write"`      // "ok" or the error of the etcd write
	WriteDone bool   `json:"write_done"` // the write succeeded
}

func main() {
	endpoint := flag.String("endpoint", "", "etcd client URL")
	key := flag.String("key", "", "key to write")
	value := flag.String("value", "", "value to write")
	flag.Parse()
	r := report{UID: os.Getuid(), Dial: "ok", Write: "ok"}

	network, addr := "tcp", *endpoint
	if p, ok := strings.CutPrefix(*endpoint, "unix://"); ok {
		network, addr = "unix", p
	} else if i := strings.Index(addr, "://"); i >= 0 {
		addr = addr[i+3:]
	}
	if c, err := net.DialTimeout(network, addr, 3*time.Second); err != nil {
		r.Dial = err.Error()
		r.DialPerm = errors.Is(err, fs.ErrPermission)
	} else {
		c.Close()
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = cli.Put(ctx, *key, *value)
		cancel()
		cli.Close()
	}
	if err != nil {
		r.Write = err.Error()
	} else {
		r.WriteDone = true
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}
