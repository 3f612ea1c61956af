package frontend

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const disaggBody = `{"model":"qwen3-0.6b","prompt":"a long prompt about trains","stream":true,"stream_options":{"include_usage":true},"max_tokens":9,"max_completion_tokens":9}`

func decodeFields(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return m
}

func TestDisaggRemotePrefill(t *testing.T) {
	p, d := newFakeWorker(t, "w-p"), newFakeWorker(t, "w-d")
	g := &fakeGate{decision: GateDecision{Remote: true, Reason: "link 1.2 GB/s beats local prefill",
		PredictedLocal: 90 * time.Millisecond, PredictedRemote: 40 * time.Millisecond, KVBytes: 3670016}}
	h := newHarness(t, Config{}, Deps{Gate: g}, p.worker(RolePrefill), d.worker(RoleDecode))
	h.router.overlap = 1

	resp, body := h.do(t, "POST", "/v1/completions", disaggBody, "x-request-id", "req-42")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for k, want := range map[string]string{HeaderWorker: "w-d", HeaderPrefill: "remote", HeaderDisaggReason: g.decision.Reason,
		HeaderPredictedTTFT: "40.000", HeaderKVBytes: fmt.Sprint(fakePulledBytes), HeaderKVPullMS: fakePullMS,
		HeaderKVBytesPredicted: "3670016"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	if evs := sseEvents(t, body); evs[len(evs)-1] != "[DONE]" || !strings.Contains(evs[0], "tok0") {
		t.Errorf("decode stream not relayed: %q", evs)
	}

	// Prefill request: the vLLM P/D proxy shape.
	pb := p.received()
	if len(pb) != 1 {
		t.Fatalf("prefill worker got %d requests, want 1", len(pb))
	}
	pf := decodeFields(t, pb[0])
	// vLLM's NixlConnector proxy: the remote_* keys present and null,
	// max_tokens and max_completion_tokens both 1.
	wantKV := map[string]any{"do_remote_decode": true, "do_remote_prefill": false,
		"remote_engine_id": nil, "remote_block_ids": nil, "remote_host": nil, "remote_port": nil}
	if !reflect.DeepEqual(pf["kv_transfer_params"], wantKV) || pf["stream"] != false || pf["max_tokens"] != 1.0 || pf["max_completion_tokens"] != 1.0 {
		t.Errorf("prefill body = %v", pf)
	}
	for _, k := range []string{"stream_options", "min_tokens"} {
		if _, ok := pf[k]; ok {
			t.Errorf("prefill body keeps %s", k)
		}
	}
	if pf["prompt"] != "a long prompt about trains" {
		t.Errorf("prefill prompt = %v", pf["prompt"])
	}
	// Decode request: the original, plus the prefill worker's parameters.
	db := d.received()
	if len(db) != 1 {
		t.Fatalf("decode worker got %d requests, want 1", len(db))
	}
	df := decodeFields(t, db[0])
	kv, _ := df["kv_transfer_params"].(map[string]any)
	if kv["remote_engine_id"] != "w-p" || kv["do_remote_prefill"] != true || !reflect.DeepEqual(kv["remote_block_ids"], []any{7.0, 8.0, 9.0}) {
		t.Errorf("decode kv_transfer_params = %v", kv)
	}
	orig := decodeFields(t, []byte(disaggBody))
	delete(df, "kv_transfer_params")
	if !reflect.DeepEqual(df, orig) {
		t.Errorf("decode body %v, want the original %v", df, orig)
	}
	p.mu.Lock()
	d.mu.Lock()
	// Both halves carry the same id, the client's made unique.
	if p.reqIDs[0] != d.reqIDs[0] || !strings.HasPrefix(p.reqIDs[0], "req-42.") {
		t.Errorf("request ids p=%q d=%q, want the same id starting with req-42.", p.reqIDs[0], d.reqIDs[0])
	}
	d.mu.Unlock()
	p.mu.Unlock()

	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.inputs) != 1 || g.inputs[0].Decode != "w-d" || g.inputs[0].Prefill != "w-p" || g.inputs[0].DecodeOverlapBlocks != 1 {
		t.Errorf("gate inputs = %+v", g.inputs)
	}
	if len(g.observed) != 1 {
		t.Fatalf("gate observations = %d, want 1", len(g.observed))
	}
	o := g.observed[0]
	if !o.Remote || o.From != "w-p" || o.To != "w-d" || o.Predicted != 40*time.Millisecond || o.TTFT <= 0 ||
		o.KVBytes != fakePulledBytes || o.Transfer != 12500*time.Microsecond {
		t.Errorf("observation = %+v", o)
	}
}

func TestDisaggLocal(t *testing.T) {
	p, d := newFakeWorker(t, "w-p"), newFakeWorker(t, "w-d")
	g := &fakeGate{decision: GateDecision{Remote: false, Reason: "unmeasured link", PredictedLocal: 25 * time.Millisecond, KVBytes: 1 << 20}}
	h := newHarness(t, Config{}, Deps{Gate: g}, p.worker(RolePrefill), d.worker(RoleDecode))
	resp, body := h.do(t, "POST", "/v1/completions", disaggBody)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderPrefill) != "local" || resp.Header.Get(HeaderKVBytes) != "0" ||
		resp.Header.Get(HeaderPredictedTTFT) != "25.000" || resp.Header.Get(HeaderDisaggReason) != "unmeasured link" {
		t.Errorf("status %d headers %v: %s", resp.StatusCode, resp.Header, body)
	}
	if n := len(p.received()); n != 0 {
		t.Errorf("prefill worker got %d requests on the local path", n)
	}
	if db := d.received(); len(db) != 1 || string(db[0]) != disaggBody {
		t.Errorf("decode worker got %q, want the original body", db)
	}
}

// TestDisaggNeverOverrulesGate: in mode never the gate is asked only for
// its explanation; even a gate that says remote cannot disaggregate.
func TestDisaggNeverOverrulesGate(t *testing.T) {
	p, d := newFakeWorker(t, "w-p"), newFakeWorker(t, "w-d")
	g := &fakeGate{decision: GateDecision{Remote: true}}
	h := newHarness(t, Config{DisaggMode: DisaggNever}, Deps{Gate: g}, p.worker(RolePrefill), d.worker(RoleDecode))
	resp, _ := h.do(t, "POST", "/v1/completions", disaggBody)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderPrefill) != "local" || resp.Header.Get(HeaderDisaggReason) != "mode_never" || len(p.received()) != 0 {
		t.Errorf("mode never: %d %v, prefill worker got %d requests", resp.StatusCode, resp.Header, len(p.received()))
	}
}

func TestDisaggPrefillFailureFallsBackToLocal(t *testing.T) {
	p, d := newFakeWorker(t, "w-p"), newFakeWorker(t, "w-d")
	p.setMode(mode500)
	g := &fakeGate{decision: GateDecision{Remote: true, Reason: "fast link", PredictedLocal: 90 * time.Millisecond, PredictedRemote: 40 * time.Millisecond, KVBytes: 99}}
	h := newHarness(t, Config{}, Deps{Gate: g}, p.worker(RolePrefill), d.worker(RoleDecode))
	resp, body := h.do(t, "POST", "/v1/completions", disaggBody)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "w-d" || resp.Header.Get(HeaderPrefill) != "local" ||
		!strings.Contains(resp.Header.Get(HeaderDisaggReason), "fell back") || resp.Header.Get(HeaderKVBytes) != "0" {
		t.Errorf("status %d headers %v: %s", resp.StatusCode, resp.Header, body)
	}
	if db := d.received(); len(db) != 1 || string(db[0]) != disaggBody {
		t.Errorf("decode worker got %q, want the original body", db)
	}
	if got := value(t, h.s.m.fallbacks); got != 1 {
		t.Errorf("fallbacks = %v, want 1", got)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.observed) != 1 || g.observed[0].Remote || g.observed[0].Predicted != 90*time.Millisecond {
		t.Errorf("observations = %+v", g.observed)
	}
}

func TestAggregatedWorkerNeverGated(t *testing.T) {
	p, a := newFakeWorker(t, "w-p"), newFakeWorker(t, "w-a")
	g := &fakeGate{decision: GateDecision{Remote: true}}
	h := newHarness(t, Config{}, Deps{Gate: g}, p.worker(RolePrefill), a.worker(RoleAggregated))
	resp, _ := h.do(t, "POST", "/v1/completions", disaggBody)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderPrefill) != "" || len(p.received()) != 0 {
		t.Errorf("aggregated worker was disaggregated: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestRelayStreamAllocs pins the relay's hot loop: no allocation per event.
func TestRelayStreamAllocs(t *testing.T) {
	h := newHarness(t, Config{}, Deps{InFlight: nopInFlight{}})
	var stream bytes.Buffer
	for _, ev := range streamEvents(true, 200, false, nil) {
		stream.WriteString("data: " + string(ev) + "\n\n")
	}
	stream.WriteString("data: [DONE]\n\n")
	src := bytes.NewReader(stream.Bytes())
	br := bufio.NewReaderSize(src, 64<<10)
	var st relayState
	allocs := testing.AllocsPerRun(50, func() {
		src.Reset(stream.Bytes())
		br.Reset(src)
		st = relayState{start: time.Now(), workerID: "w", requestID: "r"}
		if err := h.s.relayStream(io.Discard, nil, br, nil, &st); err != nil {
			t.Fatal(err)
		}
	})
	if !st.sawDone || st.ttft == 0 {
		t.Fatalf("relay did not see the stream: %+v", st)
	}
	if allocs != 0 {
		t.Errorf("relay of a 200-token stream allocated %v times, want 0", allocs)
	}
}

type nopInFlight struct{}

func (nopInFlight) Started(string, string, int, int) {}
func (nopInFlight) FirstToken(string, string)        {}
func (nopInFlight) Finished(string, string)          {}
func (nopInFlight) Release(string, string)           {}

// Compile-time check that the fake is a valid ResponseWriter flusher chain.
var _ http.Flusher = (*statusWriter)(nil)

// TestStoresCountsTransferredBlocks: the decode worker of a remote prefill
// computes nothing (its Started counts 0 prefill blocks) but stores the
// blocks the transfer brings, so a StoreWatcher hears of them exactly as of
// a local prefill's: the node arms its KV-event expectation on both.
func TestStoresCountsTransferredBlocks(t *testing.T) {
	body := `{"model":"qwen3-0.6b","prompt":[` + strings.Repeat("1,", 47) + `1],"stream":true,"max_tokens":4}`
	for _, tc := range []struct {
		name   string
		remote bool
		start  string // the decode worker's forward Started
	}{
		{"local", false, "start w-d 2"},
		{"remote", true, "start w-d 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, d := newFakeWorker(t, "w-p"), newFakeWorker(t, "w-d")
			inf := &fakeInFlight{}
			g := &fakeGate{decision: GateDecision{Remote: tc.remote, Reason: "test"}}
			h := newHarness(t, Config{}, Deps{Gate: g, InFlight: inf}, p.worker(RolePrefill), d.worker(RoleDecode))
			h.router.overlap = 1
			resp, b := h.do(t, "POST", "/v1/completions", body)
			if resp.StatusCode != 200 || resp.Header.Get(HeaderPrefill) != map[bool]string{false: "local", true: "remote"}[tc.remote] {
				t.Fatalf("status %d, prefill %q: %s", resp.StatusCode, resp.Header.Get(HeaderPrefill), b)
			}
			got := inf.recorded()
			var stores []string
			for _, e := range got {
				if strings.HasPrefix(e, "stores ") {
					stores = append(stores, e)
				}
			}
			// 48 tokens = 3 full blocks, 1 of them on w-d already.
			if want := []string{"stores w-d 2"}; !slices.Equal(stores, want) {
				t.Errorf("stores = %q, want %q (all in-flight events: %q)", stores, want, got)
			}
			if !slices.Contains(got, tc.start) {
				t.Errorf("in-flight events %q lack %q", got, tc.start)
			}
		})
	}
}
