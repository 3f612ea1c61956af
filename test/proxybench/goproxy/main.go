// Command goproxy is the Go floor of scripts/bench-proxy.sh: a reverse proxy
// made of an HTTP server and the frontend's upstream client, with nothing
// between them. It reads the request body, sends it to one worker and relays
// the answer, flushing whenever it has nothing more buffered, as the
// frontend's relay does. It parses, tokenizes and routes nothing, so what
// it adds to a request is what a Go proxy built like the frontend pays on
// this machine; what the frontend adds beyond it is the frontend's own work.
// With -h1 it serves on internal/h1, the frontend's server (bench-proxy.sh
// runs it so); without, on net/http's. -pipe and -epoll copy bytes without
// HTTP (see pipe.go). Like the frontend it keeps the runtime's monitor
// quiet (internal/sysmon) unless SWITCHYARD_SYSMON=default.
//
//	goproxy --listen 127.0.0.1:18903 --upstream 127.0.0.1:18901 [-h1|-pipe|-epoll]
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/switchyard-llm/switchyard/internal/h1"
	"github.com/switchyard-llm/switchyard/internal/sysmon"
	"github.com/switchyard-llm/switchyard/internal/upstream"
)

func main() {
	if err := sysmon.Quiet(); err != nil {
		log.Printf("goproxy: runtime monitor left at its default: %v", err)
	}
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	to := flag.String("upstream", "", "the worker's host:port")
	lean := flag.Bool("h1", false, "serve with internal/h1 (the frontend's server) instead of net/http's")
	pipe := flag.Bool("pipe", false, "copy bytes without parsing HTTP, with goroutines (see pipe.go)")
	epoll := flag.Bool("epoll", false, "copy bytes without parsing HTTP, from one thread with epoll (see pipe.go)")
	flag.Parse()
	if *to == "" {
		fmt.Fprintln(os.Stderr, "goproxy: --upstream host:port is required")
		os.Exit(2)
	}
	switch {
	case *pipe:
		servePipe(*listen, *to)
	case *epoll:
		serveEpoll(*listen, *to)
	}
	c := &upstream.Client{Dial: (&net.Dialer{Timeout: 5 * time.Second}).DialContext, MaxIdlePerHost: 256}
	if *lean {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			log.Fatal(err)
		}
		log.Fatal((&h1.Server{Handler: proxy(c, *to)}).Serve(ln))
	}
	srv := &http.Server{Addr: *listen, Handler: proxy(c, *to), ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}

func proxy(c *upstream.Client, to string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readAll(r)
		if err != nil {
			http.Error(w, `{"error":{"message":"goproxy: read request body","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		resp, err := c.Do(r.Context(), &upstream.Request{Method: r.Method, Addr: to, Path: r.URL.RequestURI(),
			Headers: []upstream.Header{{Name: "Content-Type", Value: r.Header.Get("Content-Type")}}, Body: body})
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, `{"error":{"message":%q,"type":"server_error"}}`, "goproxy: "+err.Error())
			return
		}
		defer resp.Body.Close()
		if ct := resp.Header("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.WriteHeader(resp.StatusCode)
		fl, _ := w.(http.Flusher)
		br := readers.Get().(*bufio.Reader)
		br.Reset(resp.Body)
		defer readers.Put(br)
		for {
			line, err := br.ReadSlice('\n')
			if len(line) > 0 {
				if _, werr := w.Write(line); werr != nil {
					return
				}
			}
			if fl != nil && (err != nil || br.Buffered() == 0) {
				fl.Flush()
			}
			if err != nil && err != bufio.ErrBufferFull {
				return
			}
		}
	}
}

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// readAll reads the request body in one allocation when its length is known.
func readAll(r *http.Request) ([]byte, error) {
	if r.ContentLength < 0 || r.ContentLength > 64<<20 {
		return io.ReadAll(r.Body)
	}
	b := make([]byte, r.ContentLength)
	_, err := io.ReadFull(r.Body, b)
	return b, err
}
