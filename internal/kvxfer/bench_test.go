package kvxfer

import (
	"context"
	"io"
	"net"
	"testing"
)

// benchPull pulls 32 qwen3-0.6b blocks (56 MiB) per op over loopback.
func benchPull(b *testing.B, cfg ServerConfig, ccfg ClientConfig) {
	cfg.BlockBytes, ccfg.BlockBytes = qwenBlock, qwenBlock
	s := startServer(b, cfg)
	c := dial(b, s.Addr(), ccfg)
	hashes := randomHashes(42, 32)
	// Verify once before timing that the transfer is whole.
	tok, _ := s.Lease(hashes, nil)
	if st, err := c.Pull(context.Background(), tok, hashes, nil); err != nil || st.Blocks != 32 {
		b.Fatalf("warm-up pull: %+v, %v", st, err)
	}
	b.SetBytes(int64(len(hashes)) * qwenBlock)
	b.ResetTimer()
	for b.Loop() {
		tok, _ := s.Lease(hashes, nil)
		if _, err := c.Pull(context.Background(), tok, hashes, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPullLoopback(b *testing.B) {
	benchPull(b, ServerConfig{}, ClientConfig{})
}

func BenchmarkPullLoopbackTLS(b *testing.B) {
	pki := newTestPKI(b)
	scfg, err := TLSFiles{CertFile: pki.serverCert, KeyFile: pki.serverKey, CAFile: pki.caFile}.ServerConfig()
	if err != nil {
		b.Fatal(err)
	}
	ccfg, err := TLSFiles{CAFile: pki.caFile, CertFile: pki.clientCert, KeyFile: pki.clientKey}.ClientConfig()
	if err != nil {
		b.Fatal(err)
	}
	benchPull(b, ServerConfig{TLS: scfg}, ClientConfig{TLS: ccfg})
}

// BenchmarkRawTCPLoopback is the baseline: the same bytes per op through a
// bare loopback socket with no framing, generation or checks.
func BenchmarkRawTCPLoopback(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	const n = 32 * qwenBlock
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, DefaultChunkSize)
		req := make([]byte, 1)
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			for sent := 0; sent < n; sent += len(buf) {
				if _, err := c.Write(buf[:min(len(buf), n-sent)]); err != nil {
					return
				}
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, DefaultChunkSize)
	b.SetBytes(n)
	for b.Loop() {
		if _, err := c.Write([]byte{1}); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, 0)); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < n; {
			m, err := c.Read(buf[:min(len(buf), n-got)])
			if err != nil {
				b.Fatal(err)
			}
			got += m
		}
	}
}
