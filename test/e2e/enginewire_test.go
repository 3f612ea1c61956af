//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// thirdPartyWire is what a third-party vLLM-compatible engine was seen to
// send: tagged array events, root parents as 0, batches numbered from 1.
// It also held events until 16 had accumulated (--kv-events-batch 16),
// which the table below measures on its own.
var thirdPartyWire = []string{"--engine-wire", "vllm", "--kv-events-array", "--kv-events-parent-zero", "--kv-events-first-seq", "1"}

// bridgedHealth is the part of /health the wire tests read.
type bridgedHealth struct {
	Workers []struct {
		ID     string `json:"id"`
		Events struct {
			State  string `json:"state"`
			Cause  string `json:"cause"`
			Blocks int    `json:"blocks"`
		} `json:"events"`
		Agreement struct {
			Requests int `json:"requests"`
		} `json:"agreement"`
		Drift *struct {
			Events              uint64 `json:"events"`
			OrphanParent        uint64 `json:"orphan_parent"`
			RemovedUnknownBlock uint64 `json:"removed_unknown_block"`
			BadEvent            uint64 `json:"bad_event"`
			Rebuilds            uint64 `json:"rebuilds"`
		} `json:"drift"`
	} `json:"workers"`
}

// settledHealth reads /health until the bridges' drift counters stop
// moving: they travel with load reports (every 500 ms), so a read right
// after a run can show counters from before its last requests.
func settledHealth(t testing.TB, url string) bridgedHealth {
	t.Helper()
	var prev, cur bridgedHealth
	getJSON(t, url+"/health", &prev)
	eventually(t, 20*time.Second, "drift counters to settle", func() bool {
		time.Sleep(1200 * time.Millisecond) // two load reports
		cur = bridgedHealth{}
		getJSON(t, url+"/health", &cur)
		same := len(cur.Workers) == len(prev.Workers)
		for i := 0; same && i < len(cur.Workers); i++ {
			a, b := cur.Workers[i].Drift, prev.Workers[i].Drift
			same = a != nil && b != nil && *a == *b
		}
		prev = cur
		return same
	})
	return cur
}

// decisions reads the frontend's switchyard_router_decisions_total for
// policy, by outcome (hit, approx_hit, miss).
func decisions(t testing.TB, url, policy string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, o := range []string{"hit", "approx_hit", "miss"} {
		out[o] = int(metricSum(t, url, "switchyard_router_decisions_total{", `policy="`+policy+`"`, `outcome="`+o+`"`))
	}
	return out
}

// TestThirdPartyWireRoutingTable: two engines speaking the third-party
// wire behind bridges, the field report's 60 repeated-prefix requests. The
// kv router must find the prefixes from the engines' KV events, every
// decision from the index (none approximate), with nothing dropped by the
// bridges; round-robin is the baseline that scattering costs. Batching by
// count delays events: with 4 a batch the index keeps up; with 16 (one
// event a request here, 65 requests over two engines) the index lags up to
// 15 requests behind each engine, the frontend finds it blind and routes
// on its approximate index, which the table shows.
func TestThirdPartyWireRoutingTable(t *testing.T) {
	type row struct {
		name    string
		args    []string
		healthy bool // the index must keep up: healthy, every decision from KV events
		batched bool // events batched by count: the last batch may be held once the run is over
		hits    int
		dec     map[string]int
	}
	with := func(policy string, extra ...string) []string {
		return append(append([]string{"--router", policy}, thirdPartyWire...), extra...)
	}
	rows := []*row{
		{name: "kv", args: with("kv"), healthy: true},
		{name: "kv, batches of 4 events", args: with("kv", "--kv-events-batch", "4"), healthy: true, batched: true},
		{name: "kv, batches of 16 events", args: with("kv", "--kv-events-batch", "16")},
		{name: "round-robin", args: with("round-robin")},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var url string
			r.hits, url = routingRun(t, r.args...)
			r.dec = decisions(t, url, r.args[1])
			h := settledHealth(t, url)
			if len(h.Workers) != 2 {
				t.Fatalf("/health lists %d workers, want 2", len(h.Workers))
			}
			for _, w := range h.Workers {
				t.Logf("%s: events %s (%d blocks) %s; drift %+v", w.ID, w.Events.State, w.Events.Blocks, w.Events.Cause, *w.Drift)
				if d := w.Drift; d.OrphanParent != 0 || d.RemovedUnknownBlock != 0 || d.BadEvent != 0 || d.Rebuilds != 0 {
					t.Errorf("%s: drift %+v, want nothing dropped", w.ID, *d)
				}
				// An engine that batches by count holds the events of the
				// run's last requests until a batch fills, which at rest is
				// never: once the run is over the frontend may rightly say
				// it expected events and saw none. What the row asks is that
				// the index kept up while it routed (no approximate decision
				// below) and holds the run's blocks.
				heldBack := r.batched && w.Events.State == "silent" && strings.Contains(w.Events.Cause, "since a request routed")
				if r.healthy && (w.Events.State != "healthy" && !heldBack || w.Events.Blocks < 100 || w.Drift.Events == 0) {
					t.Errorf("%s: event state %q with %d blocks, %d events; want healthy with the run's blocks", w.ID, w.Events.State, w.Events.Blocks, w.Drift.Events)
				}
			}
			if r.healthy && r.dec["approx_hit"] != 0 {
				t.Errorf("%d decisions from the approximate index, want every one from KV events", r.dec["approx_hit"])
			}
		})
	}
	table := "\n| router, third-party wire through bridges | cache hits (of 60) | decisions: hit / approx hit / miss |\n|---|---|---|"
	for _, r := range rows {
		table += fmt.Sprintf("\n| %s | %d | %d / %d / %d |", r.name, r.hits, r.dec["hit"], r.dec["approx_hit"], r.dec["miss"])
	}
	t.Log(table)
	for _, r := range rows[:2] {
		if r.hits < 57 {
			t.Errorf("%s: %d of 60 hits, want at least 57", r.name, r.hits)
		}
	}
	if rr := rows[3].hits; rr >= 55 || rows[2].hits < rr+10 {
		t.Errorf("round-robin %d, kv with batches of 16 %d of 60 hits; the cache is sized so scattering must cost", rr, rows[2].hits)
	}
}

// The broken wire variants lose information with a gap-free sequence, so
// no bridge can see it on the wire: only the frontend's comparison of its
// index with what the engines served (or the bridges' drift) can. Each
// must leave the workers inconsistent, with the cause it names.
func TestBrokenWireIsInconsistent(t *testing.T) {
	cases := []struct {
		name   string
		args   []string
		causes []string // one of them, per worker
	}{
		// Lost stored events: the engine serves prefixes the index never
		// saw; lost removals of blocks the bridge never held show as drift.
		{"a third of events dropped", []string{"--kv-events-drop", "0.33"}, []string{"index blind", "bridge drift"}},
		// The engines evict (5 prefixes of about 110 blocks in two caches
		// of 200) and never say so: the index predicts blocks that are gone.
		{"removals skipped", []string{"--kv-events-skip-removals", "--kv-blocks", "200"}, []string{"index stale"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, url := routingRun(t, append([]string{"--router", "kv", "--engine-wire", "vllm"}, c.args...)...)
			settledAgreement(t, url)
			var h bridgedHealth
			getJSON(t, url+"/health", &h)
			flagged := 0
			for _, w := range h.Workers {
				t.Logf("%s: %s after %d requests: %s", w.ID, w.Events.State, w.Agreement.Requests, w.Events.Cause)
				ok := false
				for _, cause := range c.causes {
					ok = ok || strings.HasPrefix(w.Events.Cause, cause)
				}
				switch {
				case w.Events.State == "inconsistent" && ok:
					flagged++
				case w.Agreement.Requests >= 20:
					// The router may send one worker too few requests to
					// judge it; a worker with 20 must have been judged.
					t.Errorf("%s: state %q, cause %q after %d requests; want inconsistent with a cause starting %q",
						w.ID, w.Events.State, w.Events.Cause, w.Agreement.Requests, c.causes)
				}
			}
			if flagged == 0 {
				t.Errorf("no worker inconsistent")
			}
		})
	}
}

// startBridgedEngines starts n simulated engines speaking the third-party
// wire, each a process of its own (switchyard worker --kv-events-wire vllm),
// and a bridge process beside each (switchyard worker --engine vllm) that
// registers it on natsURL. engineArgs go to every engine.
func startBridgedEngines(t *testing.T, natsURL string, n int, engineArgs ...string) {
	t.Helper()
	for i := 1; i <= n; i++ {
		pub, replay := freeTCP(t), freeTCP(t)
		args := append([]string{"worker", "--id", fmt.Sprintf("engine-%d", i), "--http-addr", "127.0.0.1:0",
			"--kv-events-wire", "vllm", "--kv-events", pub, "--kv-replay", replay,
			"--kv-events-array", "--kv-events-parent-zero", "--kv-events-first-seq", "1"}, engineArgs...)
		_, m := start(t, readyURL, args...)
		start(t, readyURL, "worker", "--engine", "vllm", "--id", fmt.Sprintf("w%d", i), "--engine-url", m[1],
			"--kv-events", pub, "--kv-replay", replay, "--nats", natsURL, "--nats-insecure", "--registry-ttl", "2s")
	}
}

// The frontend must tokenize as the engines do. Through real bridge and
// engine processes on the third-party wire: with the same tokenizer on both
// sides repeats are routed from the index and every worker stays healthy;
// with a cl100k frontend before Qwen3-tokenizing engines, every prefix the
// engines serve from cache is one the index never predicted, and within 20
// requests a worker is inconsistent, index blind.
func TestTokenizerMismatchThroughBridges(t *testing.T) {
	qwen := qwen3Tokenizer(t)
	for _, c := range []struct {
		name     string
		frontend string
		mismatch bool
	}{
		{"same tokenizer", qwen, false},
		{"cl100k frontend, Qwen3 engines", "cl100k", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			nats := startNATS(t)
			_, m := start(t, readyURL, "frontend", "--http-addr", "127.0.0.1:0", "--nats", nats.URL(), "--nats-insecure", "--tokenizer", c.frontend)
			cl := &cluster{url: m[1]}
			startBridgedEngines(t, nats.URL(), 2, "--tokenizer", qwen)
			cl.waitHealthy(t, 2, 30*time.Second)
			worker, cause, at := untilInconsistent(t, cl.url, 20, 2)
			if !c.mismatch {
				if worker != "" {
					t.Fatalf("%s inconsistent at request %d with matching tokenizers: %s", worker, at, cause)
				}
				// Repeats of the two prefixes went where the index said.
				src := map[string]int{}
				for i := 21; i <= 26; i++ {
					r := chat(context.Background(), cl.url, fmt.Sprintf("Prefix %d. %sQuestion %d: which track?", i%2,
						strings.Repeat(fmt.Sprintf("The switchyard sorts the freight cars of train %d onto their tracks. ", i%2), 10), i), 4)
					if r.err != nil {
						t.Fatal(r.err)
					}
					src[r.source]++
				}
				if src["index"] != 6 {
					t.Errorf("repeats took their overlap from %v, want the KV-event index for all 6", src)
				}
				return
			}
			if worker == "" {
				t.Fatalf("no worker inconsistent after 20 requests with a cl100k frontend before Qwen3 engines")
			}
			if !strings.HasPrefix(cause, "index blind") {
				t.Errorf("%s inconsistent at request %d with cause %q, want index blind", worker, at, cause)
			}
		})
	}
}
