// Command rawtcp measures plain TCP throughput over a link: the ceiling that
// KV transfer (kvxfer) is compared against in scripts/linkbench.sh.
//
// The data flows the way a KV pull does: the server (on the prefill side)
// sends, the client (on the decode side) asks for n bytes and reads them.
//
//	rawtcp serve --addr 198.18.0.1:9200          prints "ready: ADDR", serves until killed
//	rawtcp pull  --addr 198.18.0.1:9200 --bytes 268435456
//
// pull prints one JSON line {"bytes", "seconds", "bytes_per_sec"}; the time
// runs from sending the request to reading the last byte, as in a kvxfer
// probe. The payload is a fixed buffer: this measures the link and the
// kernel, not payload generation.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// maxBytes bounds one request so a stray client cannot pin the server.
const maxBytes = 16 << 30

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rawtcp serve|pull --addr HOST:PORT [--bytes N]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("rawtcp "+os.Args[1], flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:9200", "listen (serve) or dial (pull) address")
	n := fs.Int64("bytes", 256<<20, "bytes to pull")
	_ = fs.Parse(os.Args[2:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(ctx, *addr)
	case "pull":
		err = pull(*addr, *n)
	default:
		err = fmt.Errorf("unknown mode %q: want serve or pull", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rawtcp: %v\n", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	fmt.Printf("ready: %s\n", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		// One transfer at a time: concurrent pulls would share the link
		// and spoil each other's figure.
		if err := send(c); err != nil {
			fmt.Fprintf(os.Stderr, "rawtcp: %v\n", err)
		}
	}
}

func send(c net.Conn) error {
	defer c.Close()
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	n := int64(binary.BigEndian.Uint64(hdr[:]))
	if n <= 0 || n > maxBytes {
		return fmt.Errorf("request for %d bytes out of range", n)
	}
	buf := make([]byte, 1<<20)
	for n > 0 {
		k := min(n, int64(len(buf)))
		if _, err := c.Write(buf[:k]); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		n -= k
	}
	return nil
}

func pull(addr string, n int64) error {
	if n <= 0 || n > maxBytes {
		return fmt.Errorf("--bytes %d out of range 1..%d", n, int64(maxBytes))
	}
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(n))
	start := time.Now()
	if _, err := c.Write(hdr[:]); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	got, err := io.Copy(io.Discard, io.LimitReader(c, n))
	if err == nil && got < n {
		err = errors.New("connection closed early")
	}
	if err != nil {
		return fmt.Errorf("read after %d of %d bytes: %w", got, n, err)
	}
	sec := time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"bytes": n, "seconds": sec, "bytes_per_sec": float64(n) / sec})
}
