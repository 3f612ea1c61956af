package frontend

import (
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// clientSendBuffer is the kernel send buffer of each client connection.
// Tokens stream at kilobytes per second, so a large buffer buys nothing but
// hides a client that stopped reading: with Linux's autotuning (up to 4 MiB)
// such a client would go unnoticed for minutes, its worker generating for
// nobody. 64 KiB still moves 64 MB/s at a 1 ms round trip.
const clientSendBuffer = 64 << 10

// overloadBody is what a connection beyond MaxConnections gets.
var overloadBody = []byte(`{"error":{"message":"frontend: too many open connections; retry shortly","type":"server_error","param":null,"code":null}}`)

var overloadResponse = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
	strconv.Itoa(len(overloadBody)) + "\r\n\r\n" + string(overloadBody))

// Listener wraps ln for the frontend's HTTP server: at most
// Config.MaxConnections client connections are open at once (one beyond
// that is answered 503 with Retry-After and closed, and counted in
// switchyard_client_connections_refused_total), and each gets a small send
// buffer so a client that stops reading is noticed (see ClientStallTimeout).
func (s *Server) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, s: s}
}

type limitListener struct {
	net.Listener
	s *Server
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(clientSendBuffer)
		}
		if l.s.conns.Add(1) > int64(l.s.cfg.MaxConnections) {
			l.s.conns.Add(-1)
			l.s.m.connRefused.Inc()
			go func() {
				// Off the accept loop: a client that does not read must not
				// hold up the others.
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = c.Write(overloadResponse)
				_ = c.Close()
			}()
			continue
		}
		return &countedConn{Conn: c, n: &l.s.conns}, nil
	}
}

// countedConn gives its slot back once, on Close.
type countedConn struct {
	net.Conn
	n    *atomic.Int64
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.n.Add(-1) })
	return c.Conn.Close()
}
