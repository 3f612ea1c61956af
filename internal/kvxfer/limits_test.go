package kvxfer

import (
	"encoding/binary"
	"errors"
	"net"
	"runtime"
	"testing"
	"time"
)

// rawPullHead is the start of a PullRequest frame announcing count hashes
// under lease, without the hash list itself.
func rawPullHead(blockBytes uint32, lease string, count int) []byte {
	n := pullPrefix + len(lease) + 4 + 8*count
	b := appendHeader(nil, framePullRequest, n)
	b = append(b, protocolVersion)
	b = binary.BigEndian.AppendUint32(b, blockBytes)
	b = append(b, byte(len(lease)))
	b = append(b, lease...)
	return binary.BigEndian.AppendUint32(b, uint32(count))
}

// readRefusal reads one Error frame from c within 10 s.
func readRefusal(t testing.TB, c net.Conn) errorFrame {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, p, err := newFrameReader(c).next(maxControlLen)
	if err != nil {
		t.Fatalf("no answer to the request: %v", err)
	}
	var e errorFrame
	if typ != frameError || e.decode(p) != nil {
		t.Fatalf("answer type 0x%02x, want an error frame", typ)
	}
	return e
}

func rawDial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFloodRefusedBeforeBuffering is the field finding: 200 unauthenticated
// connections each announcing an 8 MiB pull request drove a prefill worker
// from 96 MB to 1.7 GB. Each must now be refused on its lease, before the
// server reads (or allocates for) the block list, and the heap must not grow
// by the announced sizes.
func TestFloodRefusedBeforeBuffering(t *testing.T) {
	const conns = 200
	s := startServer(t, ServerConfig{BlockBytes: 1024, MaxUnauthConns: conns})
	count := (maxRequestLen - pullPrefix - 32 - 4) / 8 // ≈ 8 MiB of hashes
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = rawDial(t, s.Addr())
		if _, err := cs[i].Write(rawPullHead(1024, "00112233445566778899aabbccddeeff", count)); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cs {
		if e := readRefusal(t, c); e.Code != CodeLeaseUnknown {
			t.Fatalf("connection %d refused with %s (%s), want lease_unknown", i, e.Code, e.Msg)
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// Announced: 200 × 8 MiB = 1.6 GiB. Allowed: the connections' own
	// buffers (32 KiB each) with a wide margin.
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Errorf("heap grew %d MiB for %d refused connections; the block lists were buffered", grew>>20, conns)
	}
}

// TestPullRequestBoundedByLease checks a live lease admits a block list no
// longer than its own, and the server-wide request memory budget.
func TestPullRequestBoundedByLease(t *testing.T) {
	s := startServer(t, ServerConfig{BlockBytes: 1024, MaxRequestMemory: 64})
	hashes := randomHashes(1, 16) // 128 bytes of hashes: over the 64-byte budget
	tok, err := s.Lease(hashes[:4], nil)
	if err != nil {
		t.Fatal(err)
	}
	c := rawDial(t, s.Addr())
	c.Write(rawPullHead(1024, tok, 5)) // one more than leased
	if e := readRefusal(t, c); e.Code != CodeBadRequest {
		t.Errorf("5 hashes under a 4-block lease: refused with %s (%s), want bad_request", e.Code, e.Msg)
	}
	tok, err = s.Lease(hashes, nil)
	if err != nil {
		t.Fatal(err)
	}
	c = rawDial(t, s.Addr())
	c.Write(rawPullHead(1024, tok, 16))
	if e := readRefusal(t, c); e.Code != CodeBusy {
		t.Errorf("128 bytes of hashes over a 64-byte budget: refused with %s (%s), want busy", e.Code, e.Msg)
	}
	// The lease was only peeked at, so a pull within the budget still works.
	small := startServer(t, ServerConfig{BlockBytes: 1024})
	tok, err = small.Lease(hashes, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := dial(t, small.Addr(), ClientConfig{BlockBytes: 1024})
	n := 0
	if _, err := cl.Pull(t.Context(), tok, hashes, func(uint64) error { n++; return nil }); err != nil || n != 16 {
		t.Errorf("pull within budget: %d blocks, err %v", n, err)
	}
}

// TestOversizedControlFrameRefused checks a probe or ping announcing a large
// payload is refused without being read.
func TestOversizedControlFrameRefused(t *testing.T) {
	s := startServer(t, ServerConfig{BlockBytes: 1024})
	c := rawDial(t, s.Addr())
	c.Write(appendHeader(nil, frameProbeRequest, 8<<20))
	if e := readRefusal(t, c); e.Code != CodeBadRequest {
		t.Errorf("refused with %s, want bad_request", e.Code)
	}
}

// TestPingsDoNotHoldSlots is the field finding: 300 connections that only
// ping held all 256 slots, and every pull then failed. Connections that
// never authenticate now share MaxUnauthConns, the longest idle of them is
// evicted for a newcomer, and a pull under a lease still gets through.
func TestPingsDoNotHoldSlots(t *testing.T) {
	s := startServer(t, ServerConfig{BlockBytes: 1024, MaxConns: 4, MaxUnauthConns: 4})
	for i := range 30 {
		c := dial(t, s.Addr(), ClientConfig{BlockBytes: 1024})
		if _, err := c.Ping(t.Context()); err != nil {
			t.Fatalf("ping %d: %v", i, err)
		}
	}
	if got := s.ConnsEvicted(); got < 26 {
		t.Errorf("ConnsEvicted = %d after 30 ping-only connections with 4 unauthenticated slots; want at least 26", got)
	}
	hashes := randomHashes(7, 4)
	for i := range 4 { // all the authenticated slots, held open
		tok, _ := s.Lease(hashes, nil)
		c := dial(t, s.Addr(), ClientConfig{BlockBytes: 1024})
		if _, err := c.Pull(t.Context(), tok, hashes, nil); err != nil {
			t.Fatalf("pull %d with ping-only connections open: %v", i, err)
		}
	}
	// A fifth authenticated connection is over MaxConns: refused busy.
	tok, _ := s.Lease(hashes, nil)
	c := dial(t, s.Addr(), ClientConfig{BlockBytes: 1024})
	_, err := c.Pull(t.Context(), tok, hashes, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Code != CodeBusy {
		t.Errorf("pull over MaxConns authenticated connections: %v, want busy", err)
	}
}

// isReset reports whether err is the peer closing the connection (a reset
// rather than a clean EOF); a timeout is not.
func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// TestAutoTLS checks the in-memory mTLS pair: its client pulls from its
// server; a plain client and a client from another AutoTLS call are refused
// at the handshake, before any frame is read.
func TestAutoTLS(t *testing.T) {
	srvTLS, cliTLS, err := AutoTLS([]string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, otherCli, err := AutoTLS([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, ServerConfig{BlockBytes: 1024, TLS: srvTLS})
	hashes := randomHashes(3, 4)
	tok, _ := s.Lease(hashes, nil)
	c := dial(t, s.Addr(), ClientConfig{BlockBytes: 1024, TLS: cliTLS})
	if _, err := c.Pull(t.Context(), tok, hashes, func(uint64) error { return nil }); err != nil {
		t.Fatalf("pull with the auto pair: %v", err)
	}
	for name, cfg := range map[string]ClientConfig{
		"plain TCP":     {BlockBytes: 1024},
		"other auto CA": {BlockBytes: 1024, TLS: otherCli},
	} {
		c, err := Dial(t.Context(), s.Addr(), cfg)
		if err == nil {
			_, err = c.Ping(t.Context())
			c.Close()
		}
		if err == nil {
			t.Errorf("%s: ping succeeded against an mTLS server", name)
		}
	}
}

// TestProbeKey checks a server with a probe key sends probe bytes only to a
// connection that presented it: a probe has no lease to authenticate it,
// and each one makes the server send up to MaxProbeBytes.
func TestProbeKey(t *testing.T) {
	s := startServer(t, ServerConfig{BlockBytes: 1024, ProbeKey: "pk"})
	for _, tc := range []struct {
		name, key string
		ok        bool
	}{{"no key", "", false}, {"wrong key", "nope", false}, {"right key", "pk", true}} {
		c := dial(t, s.Addr(), ClientConfig{BlockBytes: 1024, ProbeKey: tc.key})
		if _, err := c.Ping(t.Context()); err != nil {
			t.Fatalf("%s: ping: %v", tc.name, err) // pings stay open: they cost nothing
		}
		_, _, err := c.Probe(t.Context(), 1<<20)
		var re *RemoteError
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: probe: %v", tc.name, err)
		case !tc.ok && (!errors.As(err, &re) || re.Code != CodeUnauthorized):
			t.Errorf("%s: probe error %v, want an unauthorized refusal", tc.name, err)
		}
	}
}
