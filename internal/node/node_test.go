package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/bus/bustest"
	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/linkemu"
	"github.com/switchyard-llm/switchyard/internal/openai"
)

// cluster is an in-process deployment on a real embedded NATS server.
type cluster struct {
	fe      *Frontend
	workers []*Worker
}

type workerSpec struct {
	id, role  string
	eventsOff bool
}

func startCluster(t *testing.T, fcfg FrontendConfig, rate linkemu.Rate, specs ...workerSpec) *cluster {
	t.Helper()
	ctx := context.Background()
	nc := bustest.Connect(t, bustest.Server(t, bus.EmbeddedConfig{Port: -1}).ClientURL())
	subj, _ := bus.NewSubjects("test")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fcfg.HTTPAddr, fcfg.NC, fcfg.Subjects, fcfg.Logger = "127.0.0.1:0", nc, subj, log
	if fcfg.Model == "" {
		fcfg.Model = "qwen3-0.6b"
	}
	c := &cluster{}
	var err error
	if c.fe, err = StartFrontend(ctx, fcfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.fe.Close() })
	for _, s := range specs {
		wc := WorkerConfig{
			Sim:      sim.Config{ID: s.id, Role: s.role, Speedup: 50, KVBlocks: 2000},
			HTTPAddr: "127.0.0.1:0", NC: nc, Subjects: subj, KVEventsOff: s.eventsOff, Logger: log,
		}
		if s.role == bus.RolePrefill {
			wc.LinkRate = rate
		}
		w, err := StartWorker(ctx, wc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		c.workers = append(c.workers, w)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.fe.WaitWorkers(wctx, len(specs)); err != nil {
		t.Fatal(err)
	}
	return c
}

type reply struct {
	text    string
	usage   openai.Usage
	headers http.Header
}

func (c *cluster) complete(t *testing.T, body map[string]any) reply {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(c.fe.URL()+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var r openai.CompletionResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return reply{text: r.Choices[0].Text, usage: *r.Usage, headers: resp.Header}
}

func (c *cluster) setDisagg(t *testing.T, mode string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, c.fe.URL()+"/admin/disagg", strings.NewReader(fmt.Sprintf(`{"mode":%q}`, mode)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT /admin/disagg %s: %v %v", mode, err, resp)
	}
	resp.Body.Close()
}

func prompt(words int, seed int) string {
	vocab := []string{"river", "signal", "copper", "lantern", "orbit", "meadow", "cipher", "harbor"}
	var b strings.Builder
	for i := 0; i < words; i++ {
		b.WriteString(vocab[(i*7+seed*13+i/5)%len(vocab)])
		b.WriteByte(' ')
	}
	return b.String()
}

// TestDisaggregatedMatchesAggregated sends the same request prefilled
// locally and remotely, the KV crossing real TCP (kvxfer), and checks the
// answer is identical; and that the remote path moved exactly the blocks
// the decode worker lacked.
func TestDisaggregatedMatchesAggregated(t *testing.T) {
	c := startCluster(t, FrontendConfig{Disagg: "never"}, 0,
		workerSpec{id: "p1", role: bus.RolePrefill}, workerSpec{id: "d1", role: bus.RoleDecode})
	body := func(seed int) map[string]any {
		return map[string]any{"model": "qwen3-0.6b", "prompt": prompt(800, seed), "max_tokens": 12, "seed": 7}
	}
	local := c.complete(t, body(1))
	if got := local.headers.Get("x-switchyard-prefill"); got != "local" || local.headers.Get("x-switchyard-disagg-reason") != "mode_never" {
		t.Fatalf("mode never: prefill header %q, want local", got)
	}
	c.setDisagg(t, "always")
	// A different prompt, so nothing is cached on d1; then compare with the
	// same prompt served locally on a fresh decode path.
	remote := c.complete(t, body(2))
	if got := remote.headers.Get("x-switchyard-prefill"); got != "remote" {
		t.Fatalf("mode always: prefill header %q (reason %q), want remote", got, remote.headers.Get("x-switchyard-disagg-reason"))
	}
	full := remote.usage.PromptTokens / 16 * 16
	if remote.usage.PromptTokensDetails.CachedTokens < full-16 {
		t.Errorf("remote prefill: cached_tokens %d, want the pulled blocks ≈ %d", remote.usage.PromptTokensDetails.CachedTokens, full)
	}
	// The gate predicts every prompt token's KV; the decode worker pulls
	// and reports the full blocks it lacked.
	wantPredicted := fmt.Sprint(remote.usage.PromptTokens * 114688)
	if got := remote.headers.Get("x-switchyard-kv-bytes-predicted"); got != wantPredicted {
		t.Errorf("predicted kv bytes header %s, want %s (every prompt token's KV)", got, wantPredicted)
	}
	wantBytes := fmt.Sprint(full * 114688)
	if got := remote.headers.Get("x-switchyard-kv-bytes"); got != wantBytes {
		t.Errorf("kv bytes header %s, want %s (the full blocks pulled)", got, wantBytes)
	}
	c.setDisagg(t, "never")
	c.complete(t, map[string]any{"model": "qwen3-0.6b", "prompt": "flush", "max_tokens": 1})
	// Same prompt as the remote one, served locally: d1 now holds its
	// blocks, so compare text and token counts, not cached tokens.
	again := c.complete(t, body(2))
	if again.text != remote.text || again.usage.PromptTokens != remote.usage.PromptTokens || again.usage.CompletionTokens != remote.usage.CompletionTokens {
		t.Errorf("remote %q %+v != local %q %+v", remote.text, remote.usage, again.text, again.usage)
	}
	// And a fresh prompt served purely locally matches the same fresh
	// prompt served remotely (determinism across both paths).
	c.setDisagg(t, "always")
	r3 := c.complete(t, body(3))
	c2 := startCluster(t, FrontendConfig{Disagg: "never"}, 0, workerSpec{id: "a1", role: bus.RoleAggregated})
	l3 := c2.complete(t, body(3))
	if r3.text != l3.text || r3.usage.CompletionTokens != l3.usage.CompletionTokens || r3.usage.PromptTokens != l3.usage.PromptTokens {
		t.Errorf("disaggregated %q %+v differs from aggregated %q %+v", r3.text, r3.usage, l3.text, l3.usage)
	}
}

// TestAutoStaysLocalOnSlowLink: at an emulated 1 Gbit/s, remote prefill of
// qwen3-0.6b KV never pays, and auto must see that from the measured link.
func TestAutoStaysLocalOnSlowLink(t *testing.T) {
	rate, _ := linkemu.ParseRate("1gbit")
	c := startCluster(t, FrontendConfig{Disagg: "auto"}, rate,
		workerSpec{id: "p1", role: bus.RolePrefill}, workerSpec{id: "d1", role: bus.RoleDecode})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if st, ok := (adapters{c.fe}).Link("p1", "d1"); ok && st.Measured {
			// The emulator paces to 125e6 B/s, so a probe can never honestly
			// see more than that (plus a burst margin). It can see less: on a
			// CI machine whose two cores are busy the pacing goroutines run
			// late, and 75e6 B/s was seen under a load average of 8. Only the
			// ceiling is tight; the floor catches a link that barely moves.
			if !raceEnabled && (st.BytesPerSec < 25e6 || st.BytesPerSec > 135e6) {
				t.Errorf("probed 1 Gbit/s emulated link at %.0f B/s, want at most ≈ 125e6 and not a stall", st.BytesPerSec)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("link p1 → d1 not probed within 20 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := c.complete(t, map[string]any{"model": "qwen3-0.6b", "prompt": prompt(3000, 4), "max_tokens": 2})
	if got, why := r.headers.Get("x-switchyard-prefill"), r.headers.Get("x-switchyard-disagg-reason"); got != "local" || why != "local_faster" {
		t.Errorf("auto on a 1 Gbit/s link: prefill %s (%s), want local (local_faster)", got, why)
	}
}
