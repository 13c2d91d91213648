//go:build !unix

package gateway

import "net"

// newRawConn returns c: raw system calls on the socket are a Unix
// optimisation (see rawconn.go); elsewhere the connection reads and writes
// through the runtime as any net.Conn does.
func newRawConn(c net.Conn) net.Conn { return c }

// upstreamConn returns c: the check for a connection the upstream closed
// while idle peeks at the socket (see rawconn.go).
func upstreamConn(c net.Conn) net.Conn { return c }
