package bench

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/engine/sim"
)

// TestClientAPIs drives a real simulated engine, which serves every API
// itself, through each --api: every request is measured from its stream,
// with its usage, and the same prompt costs the same output whatever API
// carries it.
func TestClientAPIs(t *testing.T) {
	w, err := sim.NewWorker(sim.Config{ID: "sim", KVBlocks: 256, Speedup: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	srv := httptest.NewServer(w.Handler())
	t.Cleanup(func() { cancel(); <-done; srv.Close() })

	b := NewPromptBuilder(1)
	for _, api := range APIs {
		t.Run(api, func(t *testing.T) {
			c := NewClient(ClientConfig{URL: srv.URL, MaxConns: 1, Timeout: 30 * time.Second, API: api})
			defer c.Close()
			c.SetModel("qwen3-0.6b")
			var recs []Record
			for i := range 2 {
				it := Item{Index: i, InputTokens: 300, MaxTokens: 7, unique: 5}
				var rec Record
				c.Complete(context.Background(), b, &it, &rec)
				recs = append(recs, rec)
			}
			for i, rec := range recs {
				if rec.Outcome != OutcomeOK || rec.Chunks == 0 || rec.TTFTS <= 0 || rec.CompletionTokens != 7 || rec.PromptTokens < 250 {
					t.Errorf("request %d: %+v", i, rec)
				}
			}
			if recs[1].CachedTokens < 250 {
				t.Errorf("the repeated prompt was served with %d cached tokens, want most of its %d", recs[1].CachedTokens, recs[1].PromptTokens)
			}
		})
	}
}
