package router

import (
	"testing"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// A LoRA adapter's request prefers a worker that holds the adapter, then
// one with a free slot, over one whose slots hold other adapters, unless a
// longer cached prefix outweighs the load; with or without timing profiles.
func TestAdapterAffinity(t *testing.T) {
	p := h100Profile(t)
	for _, timed := range []bool{false, true} {
		idx := kvindex.New(kvindex.Config{})
		r, _ := newTestRouter(t, Config{Index: idx})
		h := hashes(3, 32)
		w := func(id string, st AdapterState) Worker {
			wk := Worker{ID: id, EventsHealthy: true, Adapter: st}
			if timed {
				wk.Profile = &p
			}
			return wk
		}
		req := &Request{Hashes: h, PromptTokens: len(h) * 16, OutputTokens: 16, BlockSize: 16}
		tests := []struct {
			name  string
			cands []Worker
			store map[string]int // leading blocks each worker caches
			want  string
		}{
			{"held beats load", []Worker{w("load", AdapterLoad), w("held", AdapterReady)}, nil, "held"},
			{"load beats swap", []Worker{w("swap", AdapterSwap), w("load", AdapterLoad)}, nil, "load"},
			{"held beats a little more overlap", []Worker{w("load", AdapterLoad), w("held", AdapterReady)}, map[string]int{"load": 2, "held": 1}, "held"},
		}
		for _, tc := range tests {
			for _, c := range tc.cands {
				idx.Clear(c.ID)
			}
			for id, n := range tc.store {
				idx.Store(id, h[:n])
			}
			d, err := r.Pick(req, tc.cands)
			if err != nil || d.Worker != tc.want {
				t.Errorf("timed %v, %s: picked %q (%v), want %q", timed, tc.name, d.Worker, err, tc.want)
			}
		}
	}
}
