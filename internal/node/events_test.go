package node

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/bus/bustest"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// TestEventChainRoutesAndDetectsSilence runs the whole chain in process with
// default timings — simulated engine → publisher → NATS → consumer → index →
// router — and checks that a repeated prefix lands on the worker holding it,
// and that a worker whose events stop is reported silent within 3 s of its
// last heartbeat, while it is still registered.
func TestEventChainRoutesAndDetectsSilence(t *testing.T) {
	ctx := context.Background()
	emb := bustest.Server(t, bus.EmbeddedConfig{Port: -1})
	conn := func() *nats.Conn { return bustest.Connect(t, emb.ClientURL()) }
	subj, _ := bus.NewSubjects("chain")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fe, err := StartFrontend(ctx, FrontendConfig{HTTPAddr: "127.0.0.1:0", NC: conn(), Subjects: subj, Model: "qwen3-0.6b", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fe.Close() })
	workerConns := map[string]*nats.Conn{}
	for _, id := range []string{"w1", "w2", "w3"} {
		nc := conn()
		workerConns[id] = nc
		w, err := StartWorker(ctx, WorkerConfig{Sim: sim.Config{ID: id, Speedup: 50}, HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := fe.WaitWorkers(wctx, 3); err != nil {
		t.Fatal(err)
	}
	c := &cluster{fe: fe}
	body := map[string]any{"model": "qwen3-0.6b", "prompt": prompt(1500, 9), "max_tokens": 2}
	first := c.complete(t, body)
	holder := first.headers.Get("x-switchyard-worker")
	// The stored events must reach the index before the next pick counts
	// on them; wait for the index, not for time.
	deadline := time.Now().Add(10 * time.Second)
	for (adapters{fe}).Overlaps(hashesOf(t, body))[holder] == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s's blocks never reached the index", holder)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := 0; i < 4; i++ {
		r := c.complete(t, body)
		if got := r.headers.Get("x-switchyard-worker"); got != holder {
			t.Errorf("repeat %d went to %s, want %s (holds the prefix)", i, got, holder)
		}
		if ov, _ := strconv.Atoi(r.headers.Get("x-switchyard-overlap-tokens")); ov < first.usage.PromptTokens-32 {
			t.Errorf("repeat %d: overlap %d tokens, want ≈ %d", i, ov, first.usage.PromptTokens)
		}
	}

	// Cut w2's bus connection: no events, no heartbeats, but its registry
	// entry lives on for the TTL (6 s), so only event health can tell.
	workerConns["w2"].Close()
	var cause string
	deadline = time.Now().Add(15 * time.Second)
	for {
		if st, ok := (adapters{fe}).EventStatus("w2"); ok && st.State == "silent" {
			cause = st.Cause
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("w2 never reported silent")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The consumer measured the silence when it flagged it.
	m := regexp.MustCompile(`for ([0-9.]+)(m?s)`).FindStringSubmatch(cause)
	if m == nil {
		t.Fatalf("cause %q does not say how long w2 was silent", cause)
	}
	age, _ := strconv.ParseFloat(m[1], 64)
	if m[2] == "ms" {
		age /= 1000
	}
	if age > 3 {
		t.Errorf("w2 flagged silent after %.2f s without events, want within 3 s", age)
	}
	resp, err := http.Get(fe.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Status  string `json:"status"`
		Workers []struct {
			ID     string `json:"id"`
			Events struct {
				State string `json:"state"`
			} `json:"events"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if h.Status != "degraded" {
		t.Errorf("/health status %q with w2 silent, want degraded", h.Status)
	}
	t.Logf("w2: %s", cause)
}

// hashesOf is the block hash chain of a completions body's text prompt, as
// the frontend computes it.
func hashesOf(t *testing.T, body map[string]any) []uint64 {
	t.Helper()
	tk, err := tokenizer.New()
	if err != nil {
		t.Fatal(err)
	}
	return kvindex.HashChain(nil, "", tk.Encode(body["prompt"].(string)), 16)
}

// TestFrontendStartsAfterWorkers: a frontend (re)started against a live
// deployment picks up the workers already registered.
func TestFrontendStartsAfterWorkers(t *testing.T) {
	ctx := context.Background()
	nc := bustest.Connect(t, bustest.Server(t, bus.EmbeddedConfig{Port: -1}).ClientURL())
	subj, _ := bus.NewSubjects("late")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, spec := range []workerSpec{{id: "p1", role: bus.RolePrefill}, {id: "d1", role: bus.RoleDecode}} {
		w, err := StartWorker(ctx, WorkerConfig{Sim: sim.Config{ID: spec.id, Role: spec.role, Speedup: 50}, HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
	}
	fe, err := StartFrontend(ctx, FrontendConfig{HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj, Model: "qwen3-0.6b", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fe.Close() })
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := fe.WaitWorkers(wctx, 2); err != nil {
		t.Fatal(err)
	}
	// The pair registered before the frontend is still probed.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if st, ok := (adapters{fe}).Link("p1", "d1"); ok && st.Measured {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("link p1 → d1 never probed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
