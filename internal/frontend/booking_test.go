package frontend

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/router"
)

// bookingRouter is a real router as the frontend's Router, booking each
// request at Pick as the node's does, and as its InFlight.
type bookingRouter struct{ routerAdapter }

func (b bookingRouter) Started(w, id string, prefill, prompt int) {
	b.r.Started(w, id, prefill, prompt)
}
func (b bookingRouter) FirstToken(w, id string) { b.r.FirstToken(w, id) }
func (b bookingRouter) Finished(w, id string)   { b.r.Finished(w, id) }
func (b bookingRouter) Release(w, id string)    { b.r.Release(w, id) }

func newBookingRouter(t testing.TB) bookingRouter {
	t.Helper()
	r, err := router.New(router.Config{Now: func() time.Time { return time.Unix(0, 0) }})
	if err != nil {
		t.Fatal(err)
	}
	return bookingRouter{routerAdapter{r}}
}

// inFlight is what the router counts on each worker.
func (b bookingRouter) inFlight(ids ...string) map[string]router.Load {
	out := map[string]router.Load{}
	for _, id := range ids {
		if l := b.r.Load(id); l != (router.Load{}) {
			out[id] = l
		}
	}
	return out
}

// otherPrefillGate sends every prefill remote, to the prefill worker the
// frontend did not propose, or to Prefill when set.
type otherPrefillGate struct {
	fakeGate
	workers []string
	prefill string
}

func (g *otherPrefillGate) Decide(ctx context.Context, in GateInput) GateDecision {
	g.fakeGate.Decide(ctx, in)
	d := GateDecision{Remote: true, Reason: "test: another prefill worker", Prefill: g.prefill}
	for _, w := range g.workers {
		if d.Prefill == "" && w != in.Prefill {
			d.Prefill = w
		}
	}
	return d
}

// longPrompt fills several blocks, so a booking carries prefill blocks.
var longPrompt = strings.Repeat("the quick brown fox jumps over the lazy dog ", 20)

func bookingBody(stream bool) string {
	s := "false"
	if stream {
		s = "true"
	}
	return `{"model":"qwen3-0.6b","prompt":"` + longPrompt + `","max_tokens":5,"stream":` + s + `}`
}

// TestBookingsReleasedOnEveryPath drives each way a request can go after
// its picks and checks that the router ends with nothing in flight: every
// pick was taken over by a forward or remote prefill that finished, or
// released.
func TestBookingsReleasedOnEveryPath(t *testing.T) {
	cases := []struct {
		name    string
		pWorker string // mode of the prefill worker(s)
		dWorker string // mode of the decode (or aggregated) workers
		gate    func(ids []string) Gate
		decodes int
		status  int
	}{
		{name: "aggregated", dWorker: modeOK, status: 200},
		{name: "retried on another worker, which fails too", dWorker: mode500, decodes: 2, status: 502},
		{name: "gate keeps prefill local", pWorker: modeOK, dWorker: modeOK,
			gate: func([]string) Gate { return &fakeGate{decision: GateDecision{Reason: "local is faster"}} }, status: 200},
		{name: "remote prefill", pWorker: modeOK, dWorker: modeOK,
			gate: func([]string) Gate { return &fakeGate{decision: GateDecision{Remote: true, Reason: "remote"}} }, status: 200},
		{name: "remote prefill fails, local fallback", pWorker: mode500, dWorker: modeOK,
			gate: func([]string) Gate { return &fakeGate{decision: GateDecision{Remote: true, Reason: "remote"}} }, status: 200},
		{name: "decode fails after remote prefill, retried", pWorker: modeOK, dWorker: mode500, decodes: 2,
			gate: func([]string) Gate { return &fakeGate{decision: GateDecision{Remote: true, Reason: "remote"}} }, status: 502},
		{name: "gate names another prefill worker", pWorker: modeOK, dWorker: modeOK,
			gate: func(ids []string) Gate { return &otherPrefillGate{workers: ids} }, status: 200},
		{name: "gate names an unknown prefill worker", pWorker: modeOK, dWorker: modeOK,
			gate: func(ids []string) Gate { return &otherPrefillGate{workers: ids, prefill: "nope"} }, status: 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			br := newBookingRouter(t)
			var ws []Worker
			var ids, pids []string
			role := RoleAggregated
			var g Gate
			if tc.gate != nil {
				role = RoleDecode
				for _, id := range []string{"w-p1", "w-p2"} {
					fw := newFakeWorker(t, id)
					fw.setMode(tc.pWorker)
					ws, ids, pids = append(ws, fw.worker(RolePrefill)), append(ids, id), append(pids, id)
				}
				g = tc.gate(pids)
			}
			for i := range max(1, tc.decodes) {
				id := "w-d" + string(rune('1'+i))
				fw := newFakeWorker(t, id)
				fw.setMode(tc.dWorker)
				ws, ids = append(ws, fw.worker(role)), append(ids, id)
			}
			deps := Deps{Router: br, InFlight: br}
			if g != nil {
				deps.Gate = g
			}
			h := newHarness(t, Config{}, deps, ws...)
			for _, stream := range []bool{false, true} {
				resp, body := h.do(t, "POST", "/v1/completions", bookingBody(stream))
				if resp.StatusCode != tc.status {
					t.Fatalf("stream %v: status %d, want %d: %s", stream, resp.StatusCode, tc.status, body)
				}
				// A failed request's answer is written after serve returns,
				// a successful one's after its worker's Finished.
				if got := br.inFlight(ids...); len(got) != 0 {
					t.Errorf("stream %v: router still counts %v after the request", stream, got)
				}
			}
		})
	}
}

// TestBookingsWhileInFlight checks what the router counts while a request
// is under way, where a missing release would show before the request
// ends: the prefill pool's pick is released as soon as the gate keeps the
// prefill local, or names another prefill worker; a remote prefill's decode
// worker is counted, with nothing to prefill, while the prefill runs; and
// a client that leaves takes every booking with it.
func TestBookingsWhileInFlight(t *testing.T) {
	cases := []struct {
		name  string
		gate  func(ids []string) Gate
		hang  string // the worker that holds the request until the client leaves
		check func(t *testing.T, br bookingRouter)
	}{
		{name: "gate keeps prefill local", hang: "w-d",
			gate: func([]string) Gate { return &fakeGate{decision: GateDecision{Reason: "local is faster"}} },
			check: func(t *testing.T, br bookingRouter) {
				// Two tokens streamed: w-d is decoding.
				got := br.inFlight("w-p1", "w-p2", "w-d")
				if l := got["w-d"]; len(got) != 1 || l.InFlight != 1 || l.ActiveDecodeBlocks == 0 {
					t.Errorf("while decoding: router counts %v, want w-d alone, decoding", got)
				}
			}},
		{name: "remote prefill", hang: "prefill",
			gate: func([]string) Gate { return &fakeGate{decision: GateDecision{Remote: true, Reason: "remote"}} },
			check: func(t *testing.T, br bookingRouter) {
				got := br.inFlight("w-p1", "w-p2", "w-d")
				if len(got) != 2 || got["w-d"] != (router.Load{InFlight: 1}) {
					t.Errorf("during the remote prefill: router counts %v, want w-d in flight with nothing to prefill and one prefill worker", got)
				}
				for id, l := range got {
					if id != "w-d" && (l.InFlight != 1 || l.QueuedPrefillBlocks == 0) {
						t.Errorf("prefill worker %s: %+v, want one request with blocks to prefill", id, l)
					}
				}
			}},
		{name: "gate names another prefill worker", hang: "prefill",
			gate: func(ids []string) Gate { return &otherPrefillGate{workers: ids} },
			check: func(t *testing.T, br bookingRouter) {
				if got := br.inFlight("w-p1", "w-p2", "w-d"); len(got) != 2 {
					t.Errorf("during the remote prefill: router counts %v, want w-d and the gate's prefill worker only", got)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			br := newBookingRouter(t)
			p1, p2, d := newFakeWorker(t, "w-p1"), newFakeWorker(t, "w-p2"), newFakeWorker(t, "w-d")
			if tc.hang == "prefill" {
				p1.setMode(modeHangHeaders)
				p2.setMode(modeHangHeaders)
			} else {
				d.setMode(modeStallMidStream)
			}
			h := newHarness(t, Config{}, Deps{Router: br, InFlight: br, Gate: tc.gate([]string{"w-p1", "w-p2"})},
				p1.worker(RolePrefill), p2.worker(RolePrefill), d.worker(RoleDecode))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "POST", h.srv.URL+"/v1/completions", strings.NewReader(bookingBody(true)))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			// The client's copy of the stream: once it holds tok1, the
			// frontend has relayed both tokens, so it has seen the first
			// (FirstToken comes before the token is written on).
			streamed := &watchWriter{want: []byte("tok1"), seen: make(chan struct{})}
			go func() {
				resp, err := h.srv.Client().Do(req)
				if err == nil {
					_, err = io.Copy(streamed, resp.Body)
					resp.Body.Close()
				}
				done <- err
			}()
			if tc.hang == "prefill" {
				waitFor(t, "the request to reach a prefill worker", func() bool {
					return len(p1.received())+len(p2.received()) == 1
				})
			} else {
				// The worker receiving the request is not enough: the
				// booking moves to decoding only when the frontend sees
				// the first token.
				select {
				case <-streamed.seen:
				case err := <-done:
					t.Fatalf("stream ended before its second token: %v", err)
				}
			}
			tc.check(t, br)
			cancel()
			<-done
			waitFor(t, "the router to count nothing once the client left", func() bool {
				return len(br.inFlight("w-p1", "w-p2", "w-d")) == 0
			})
		})
	}
}

// watchWriter keeps what is written to it and closes seen once it holds
// want.
type watchWriter struct {
	want []byte
	seen chan struct{}
	buf  []byte
}

func (w *watchWriter) Write(p []byte) (int, error) {
	if w.buf = append(w.buf, p...); w.want != nil && bytes.Contains(w.buf, w.want) {
		close(w.seen)
		w.want = nil
	}
	return len(p), nil
}
