//go:build !unix

package gateway

import (
	"errors"
	"syscall"
)

// acceptShare balances connections between worker processes, which need
// Unix (see acceptshare.go); elsewhere it balances nothing.
type acceptShare struct{}

func openAcceptShare(string) (*acceptShare, error) {
	return nil, errors.New("gateway: balancing connections between workers needs Unix")
}

func (s *acceptShare) opened()                       {}
func (s *acceptShare) closed()                       {}
func (s *acceptShare) leave()                        {}
func (s *acceptShare) wait(func(bool) (bool, error)) {}

// listenQueue watches a listening socket's queue, on Unix.
type listenQueue struct{}

func newListenQueue(syscall.Conn) (*listenQueue, error) {
	return nil, errors.New("gateway: no listen queue here")
}
func (q *listenQueue) pending(bool) (bool, error) { return false, errors.ErrUnsupported }
func (q *listenQueue) Close() error               { return nil }
