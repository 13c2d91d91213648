//go:build !unix

package gateway

import (
	"errors"
	"syscall"
	"time"
)

// acceptShare balances connections between worker processes, which need
// Unix (see acceptshare.go); elsewhere it balances nothing.
type acceptShare struct{}

func openAcceptShare(string) (*acceptShare, error) {
	return nil, errors.New("gateway: balancing connections between workers needs Unix")
}

func (s *acceptShare) opened()                                    {}
func (s *acceptShare) closed()                                    {}
func (s *acceptShare) leave()                                     {}
func (s *acceptShare) wait(func(time.Duration) (bool, error))     {}
func pendingOn(syscall.RawConn) func(time.Duration) (bool, error) { return nil }
