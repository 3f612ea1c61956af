package sim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// A worker serving a model under two names with two adapters lists them
// as vLLM does, registers them, caches each adapter's blocks under its own
// root and reports its adapters in lora_requests_info.
func TestServedNamesAndAdapters(t *testing.T) {
	log := &eventLog{}
	w, srv := startWorker(t, Config{ServedNames: []string{"base-a", "a-chat"}, Publisher: log, MaxLoRAs: 1,
		Adapters: []bus.Adapter{{Name: "lora-1", Root: "/adapters/lora-1"}, {Name: "lora-2"}}})
	info := w.Info()
	if info.Model != "base-a" || !slices.Equal(info.Aliases, []string{"a-chat"}) || len(info.Adapters) != 2 {
		t.Errorf("registry entry %q aliases %q adapters %+v", info.Model, info.Aliases, info.Adapters)
	}
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list openai.ModelList
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	var got []string
	for _, m := range list.Data {
		p := "null"
		if m.Parent != nil {
			p = *m.Parent
		}
		got = append(got, m.ID+":"+m.Root+":"+p)
	}
	if want := []string{"base-a:qwen3-0.6b:null", "a-chat:qwen3-0.6b:null", "lora-1:/adapters/lora-1:base-a", "lora-2:lora-2:base-a"}; !slices.Equal(got, want) {
		t.Errorf("/v1/models %q, want %q", got, want)
	}

	prompt := essay(200, 3)
	tok, _ := tokenizer.New()
	toks := tok.Encode(prompt)
	complete := func(model string) (int, int) {
		code, _, b := post(t, srv.URL+"/v1/completions", mustJSON(t, map[string]any{"model": model, "prompt": prompt, "max_tokens": 1}))
		var r openai.CompletionResponse
		if code != 200 || json.Unmarshal(b, &r) != nil || r.Model != model {
			t.Fatalf("%s: status %d: %s", model, code, b)
		}
		return code, r.Usage.PromptTokensDetails.CachedTokens
	}
	if _, c := complete("base-a"); c != 0 {
		t.Errorf("base first: cached %d", c)
	}
	if _, c := complete("lora-1"); c != 0 {
		t.Errorf("lora-1 after the base: cached %d, want 0 (another cache)", c)
	}
	if _, c := complete("a-chat"); c == 0 {
		t.Errorf("alias after the base: cached 0, want the base's blocks")
	}
	if _, c := complete("lora-1"); c == 0 {
		t.Errorf("lora-1 again: cached 0, want a hit")
	}
	// The adapter's blocks were published under the adapter's root.
	want := kvindex.HashChain(nil, kvindex.LoRASalt("lora-1", ""), toks, 16)
	stored := map[uint64]bool{}
	for _, step := range log.all() {
		for _, e := range step {
			if e.Kind == kvevents.Stored {
				for _, h := range e.Hashes {
					stored[h] = true
				}
			}
		}
	}
	if len(want) == 0 || !stored[want[0]] || !stored[want[len(want)-1]] {
		t.Errorf("lora-1's blocks were not stored under its root (%d stored)", len(stored))
	}
	code, _, b := post(t, srv.URL+"/v1/completions", `{"model":"lora-9","prompt":"x"}`)
	if code != 404 {
		t.Errorf("unknown adapter: %d %s", code, b)
	}

	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `vllm:lora_requests_info{engine="sim-0",max_lora="1",model_name="qwen3-0.6b",running_lora_adapters="",waiting_lora_adapters=""}`) {
		t.Errorf("metrics lack an idle lora_requests_info:\n%s", body)
	}
}

// With one slot, a request for a second adapter waits until the first
// adapter's request is done, then pays the swap; one for a resident adapter
// pays nothing.
func TestLoRASlots(t *testing.T) {
	l := newLoRASlots(1, 200*time.Millisecond, 1000)
	ctx := context.Background()
	if d, err := l.acquire(ctx, "a"); err != nil || d != 200*time.Millisecond {
		t.Fatalf("first load: %v, %v; want the swap time", d, err)
	}
	got := make(chan time.Duration)
	go func() {
		d, _ := l.acquire(ctx, "b")
		got <- d
	}()
	for {
		if _, waiting, _ := l.state(); slices.Equal(waiting, []string{"b"}) {
			break
		}
		time.Sleep(time.Millisecond) // polls a state change; not a synchronisation by sleep
	}
	if running, _, _ := l.state(); !slices.Equal(running, []string{"a"}) {
		t.Errorf("running %q, want [a]", running)
	}
	l.release("a")
	if d := <-got; d != 200*time.Millisecond {
		t.Errorf("b after a: paid %v, want a swap", d)
	}
	if d, _ := l.acquire(ctx, "b"); d != 0 {
		t.Errorf("b while resident: paid %v, want 0", d)
	}
	l.release("b")
	l.release("b")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.acquire(cctx, "c"); err == nil {
		t.Error("acquire with an ended context succeeded")
	}
	if running, waiting, _ := l.state(); len(running)+len(waiting) != 0 {
		t.Errorf("left running %q waiting %q", running, waiting)
	}
}
