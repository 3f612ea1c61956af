package bridge

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/bus/bustest"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/vllmpub"
)

// memIndex is the frontend's index as far as these tests need: per worker,
// the tiers of each hash.
type memIndex struct {
	mu sync.Mutex
	w  map[string]map[uint64]uint8
}

func (x *memIndex) StoreTier(w string, t kvevents.Tier, hs []uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := x.w[w]
	if m == nil {
		m = make(map[uint64]uint8)
		x.w[w] = m
	}
	for _, h := range hs {
		m[h] |= 1 << t
	}
	return true
}

func (x *memIndex) RemoveTier(w string, t kvevents.Tier, hs []uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, h := range hs {
		if v := x.w[w][h] &^ (1 << t); v == 0 {
			delete(x.w[w], h)
		} else {
			x.w[w][h] = v
		}
	}
}

func (x *memIndex) Clear(w string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.w, w)
}

func (x *memIndex) DropWorker(w string) { x.Clear(w) }

func (x *memIndex) hashes(w string) []uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []uint64
	for h := range x.w[w] {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// fakeEngine serves what a bridge reads from vLLM's HTTP API; started is
// its process_start_time_seconds.
func fakeEngine(t testing.TB, started *atomic.Int64) *httptest.Server {
	return fakeEngineModels(t, started, nil, nil)
}

// baseModels is what fakeEngine's GET /v1/models lists by default.
const baseModels = `{"object":"list","data":[{"id":"Qwen/Qwen3-0.6B","object":"model","max_model_len":40960}]}`

// fakeEngineModels is fakeEngine whose GET /v1/models body is models (nil:
// baseModels), which the test may change while it runs; reads (if not
// nil) counts the requests for it.
func fakeEngineModels(t testing.TB, started *atomic.Int64, models *atomic.Pointer[string], reads *atomic.Int64) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(rw http.ResponseWriter, _ *http.Request) {
		if reads != nil {
			reads.Add(1)
		}
		body := baseModels
		if models != nil {
			body = *models.Load()
		}
		fmt.Fprint(rw, body)
	})
	mux.HandleFunc("GET /health", func(rw http.ResponseWriter, _ *http.Request) {})
	mux.HandleFunc("GET /metrics", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(rw, "# HELP vllm:num_requests_running x\nvllm:num_requests_running{model_name=\"q\",engine=\"0\"} 3.0\n"+
			"vllm:num_requests_waiting{model_name=\"q\",engine=\"0\"} 2.0\nvllm:kv_cache_usage_perc{engine=\"0\"} 0.25\n"+
			"vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\",engine=\"0\"} 1.0\n")
		fmt.Fprintf(rw, "process_start_time_seconds %d\n", started.Load())
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func freeEndpoint(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "tcp://" + ln.Addr().String()
}

type rig struct {
	t      testing.TB
	nc     *nats.Conn
	subj   bus.Subjects
	idx    *memIndex
	cons   *kvevents.Consumer
	engine *httptest.Server
	ep     string
	replay string
	pub    *vllmpub.Publisher
	br     *Bridge
	start  atomic.Int64
	models atomic.Pointer[string] // the engine's GET /v1/models body
	reads  atomic.Int64           // GET /v1/models requests served
}

func newRig(t testing.TB, pcfg vllmpub.Config) *rig {
	t.Helper()
	srv := bustest.Server(t, bus.EmbeddedConfig{})
	r := &rig{t: t, nc: bustest.Connect(t, srv.ClientURL()), idx: &memIndex{w: map[string]map[uint64]uint8{}}}
	r.start.Store(1764000000)
	m := baseModels
	r.models.Store(&m)
	r.engine = fakeEngineModels(t, &r.start, &r.models, &r.reads)
	r.subj, _ = bus.NewSubjects("")
	var err error
	r.cons, err = kvevents.NewConsumer(kvevents.ConsumerConfig{NC: bustest.Connect(t, srv.ClientURL()), Subjects: r.subj, Index: r.idx})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.cons.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	r.ep, r.replay = freeEndpoint(t), freeEndpoint(t)
	pcfg.Endpoint, pcfg.ReplayEndpoint, pcfg.BlockSize = r.ep, r.replay, 16
	r.startEngine(pcfg)
	return r
}

func (r *rig) startEngine(pcfg vllmpub.Config) {
	r.t.Helper()
	p, err := vllmpub.New(pcfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.pub = p
	r.t.Cleanup(func() { p.Close() })
}

func (r *rig) startBridge(mod func(*Config)) *Bridge {
	r.t.Helper()
	cfg := Config{ID: "vllm-0", Engine: EngineVLLM, EngineURL: r.engine.URL, KVEvents: r.ep, KVReplay: r.replay,
		NC: r.nc, Subjects: r.subj, HTTPAddr: "127.0.0.1:0", RebuildHold: 500 * time.Millisecond, ScrapeEvery: 100 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := Start(ctx, cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.br = b
	r.t.Cleanup(func() { b.Close() })
	return b
}

// chain is one prompt as the engine would store it.
type chain struct {
	salt   string
	tokens []uint32
	hashes []uint64 // Switchyard's
}

func newChain(seed uint32, blocks int, salt string) chain {
	c := chain{salt: salt, tokens: make([]uint32, blocks*16)}
	for i := range c.tokens {
		c.tokens[i] = seed*100003 + uint32(i)
	}
	c.hashes = kvindex.HashChain(nil, salt, c.tokens, 16)
	return c
}

// store publishes the chain's blocks [from, to) as one engine batch.
func (r *rig) store(c chain, from, to int) {
	parent := kvindex.Root(c.salt)
	if from > 0 {
		parent = c.hashes[from-1]
	}
	st := &sim.StepTokens{Tokens: c.tokens[from*16 : to*16]}
	if from == 0 && c.salt != "" {
		st.Salts = map[uint64]string{c.hashes[0]: c.salt}
	}
	r.pub.PublishStepTokens([]kvevents.Event{{Kind: kvevents.Stored, Parent: parent, Hashes: c.hashes[from:to]}}, st)
}

func (r *rig) remove(hs ...uint64) {
	r.pub.PublishStep([]kvevents.Event{{Kind: kvevents.Removed, Hashes: hs}})
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *rig) waitIndex(want ...[]uint64) {
	r.t.Helper()
	var all []uint64
	for _, w := range want {
		all = append(all, w...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := r.idx.hashes("vllm-0")
		if slices.Equal(got, all) && r.cons.Health("vllm-0") == kvevents.StateHealthy {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("index for vllm-0 = %d hashes (state %v), want %d; bridge status %+v", len(got), r.cons.Health("vllm-0"), len(all), r.br.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var _ = enginewire.ReplayEnd
