package gateway

import "net"

// rawListener hands out its listener's TCP connections as rawConns.
type rawListener struct{ net.Listener }

func (l rawListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newRawConn(c), nil
}
