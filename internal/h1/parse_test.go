package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// chatRequest is what an OpenAI SDK sends for a short chat.
const chatRequest = "POST /v1/chat/completions HTTP/1.1\r\n" +
	"Host: 127.0.0.1:8080\r\n" +
	"Accept: application/json\r\n" +
	"Accept-Encoding: gzip, deflate\r\n" +
	"Authorization: Bearer sk-test\r\n" +
	"Content-Type: application/json\r\n" +
	"User-Agent: OpenAI/Python 1.99.0\r\n" +
	"X-Stainless-Lang: python\r\n" +
	"X-Stainless-Retry-Count: 0\r\n" +
	"Content-Length: 95\r\n" +
	"\r\n" +
	`{"model":"qwen3-0.6b","messages":[{"role":"user","content":"hi there"}],"max_tokens":4,"stream":true}`

var parseSeeds = []string{
	chatRequest,
	"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
	"GET /health HTTP/1.0\r\n\r\n",
	"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
	"GET /v1/models?limit=2&x=%20y HTTP/1.1\r\nhost: a\r\nconnection: Close\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nshort",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 007\r\n\r\n1234567",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
	"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Multi: 1\r\nx-multi: 2\r\nX-MULTI:3\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Space:   padded \t \r\nX-Empty:\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Obs: caf\xc3\xa9\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Fold: a\r\n b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nBad Name: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Ctl: a\x01b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Cr: a\rb\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET http://a/b HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n",
	"get / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
	"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n",
	"GET /a%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET //a/b HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nTe: trailers\r\nX-A-B_C: d\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3 \r\n\r\nabc",
}

// FuzzReadRequest: whatever the fast path accepts, http.ReadRequest reads
// the same way (method, target, URL, protocol, header, host, keep-alive,
// body and the bytes after it); whatever it declines, it leaves unread.
func FuzzReadRequest(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), 4096)
		got := fastRequest(br)
		if got == nil {
			rest, _ := io.ReadAll(br)
			if !bytes.Equal(rest, data) {
				t.Fatalf("declined, but consumed %d bytes", len(data)-len(rest))
			}
			return
		}
		want, err := http.ReadRequest(bufio.NewReaderSize(bytes.NewReader(data), 4096))
		if err != nil {
			t.Fatalf("fast path accepted what net/http rejects (%v): %q", err, data)
		}
		compareRequests(t, got, want, br, data)
	})
}

func compareRequests(t *testing.T, got, want *http.Request, br *bufio.Reader, data []byte) {
	t.Helper()
	type view struct {
		Method, RequestURI, URL, Proto, Host string
		Major, Minor                         int
		Header                               http.Header
		Close                                bool
		ContentLength                        int64
		TE                                   []string
		NoBody                               bool
	}
	v := func(r *http.Request) view {
		return view{r.Method, r.RequestURI, r.URL.String(), r.Proto, r.Host, r.ProtoMajor, r.ProtoMinor, r.Header, r.Close, r.ContentLength, r.TransferEncoding, r.Body == http.NoBody}
	}
	if g, w := v(got), v(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("for %q:\nfast     %+v\nnet/http %+v", data, g, w)
	}
	if !reflect.DeepEqual(got.URL, want.URL) {
		t.Fatalf("for %q: URL %#v, net/http %#v", data, got.URL, want.URL)
	}
	gb, gerr := io.ReadAll(got.Body)
	wb, werr := io.ReadAll(want.Body)
	if !bytes.Equal(gb, wb) || (gerr == nil) != (werr == nil) {
		t.Fatalf("for %q: body %q (%v), net/http %q (%v)", data, gb, gerr, wb, werr)
	}
	_ = br
}

// TestReadRequestMatchesNetHTTP runs the seeds, and checks that the common
// ones do take the fast path (or the comparison would test nothing).
func TestReadRequestMatchesNetHTTP(t *testing.T) {
	fast := 0
	for _, s := range parseSeeds {
		br := bufio.NewReaderSize(strings.NewReader(s), 4096)
		got := fastRequest(br)
		if got == nil {
			continue
		}
		fast++
		want, err := http.ReadRequest(bufio.NewReaderSize(strings.NewReader(s), 4096))
		if err != nil {
			t.Fatalf("fast path accepted what net/http rejects (%v): %q", err, s)
		}
		compareRequests(t, got, want, br, []byte(s))
	}
	for _, s := range []string{chatRequest, parseSeeds[1], parseSeeds[4], parseSeeds[5]} {
		if fastRequest(bufio.NewReaderSize(strings.NewReader(s), 4096)) == nil {
			t.Errorf("%q did not take the fast path", s)
		}
	}
	t.Logf("%d of %d seeds took the fast path", fast, len(parseSeeds))
}

// TestReadRequestBareLF: a whole request ended with bare LFs, from a
// client that then waits for the answer, is read from what has arrived,
// not left waiting for a CRLF CRLF that never comes.
func TestReadRequestBareLF(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	br := bufio.NewReaderSize(&stallingReader{data: "GET /x HTTP/1.1\nHost: a\n\n", stop: stop}, 4096)
	if _, err := br.Peek(1); err != nil { // as the server does before reading a request
		t.Fatal(err)
	}
	done := make(chan *http.Request, 1)
	go func() {
		req, _ := readRequest(br)
		done <- req
	}()
	select {
	case req := <-done:
		if req == nil || req.URL.Path != "/x" || req.Host != "a" {
			t.Fatalf("read %+v, want GET /x for host a", req)
		}
	case <-time.After(10 * time.Second): // it takes microseconds; a stall is forever
		t.Fatal("readRequest waited for bytes the client will never send")
	}
}

// stallingReader returns data, then blocks until stop is closed, as a
// client waiting for its answer.
type stallingReader struct {
	data string
	stop chan struct{}
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if r.data != "" {
		n := copy(p, r.data)
		r.data = r.data[n:]
		return n, nil
	}
	<-r.stop
	return 0, io.EOF
}

// TestReadRequestPipelined: two requests in one buffer are read in turn,
// the first's body not running into the second.
func TestReadRequestPipelined(t *testing.T) {
	br := bufio.NewReaderSize(strings.NewReader(parseSeeds[5]), 4096)
	first, err := readRequest(br)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(first.Body); string(b) != "hello" {
		t.Fatalf("first body %q", b)
	}
	second, err := readRequest(br)
	if err != nil || second.Method != "GET" || second.URL.Path != "/" {
		t.Fatalf("second request %+v, %v", second, err)
	}
}

// BenchmarkReadRequest reads a short chat's request as an OpenAI SDK sends
// it, with the fast path and with http.ReadRequest.
func BenchmarkReadRequest(b *testing.B) {
	for _, c := range []struct {
		name string
		read func(*bufio.Reader) (*http.Request, error)
	}{{"h1", readRequest}, {"net-http", http.ReadRequest}} {
		b.Run(c.name, func(b *testing.B) {
			src := strings.NewReader(chatRequest)
			br := bufio.NewReaderSize(src, 4096)
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(chatRequest)
				br.Reset(src)
				req, err := c.read(br)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, req.Body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
