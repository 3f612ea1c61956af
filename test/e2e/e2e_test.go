//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type apiErr struct {
	Status  int    `json:"status"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// TestOpenAIClient drives `switchyard up` with the official openai client:
// chat and completions, streamed and not, usage with cached tokens, and
// errors the client can act on.
func TestOpenAIClient(t *testing.T) {
	url := up(t, "--workers", "2", "--speedup", "20")
	var out struct {
		Models []string `json:"models"`
		Chat   struct {
			Text   string `json:"text"`
			Finish string `json:"finish"`
			Usage  usage  `json:"usage"`
		} `json:"chat"`
		ChatStream struct {
			Text   string `json:"text"`
			Usage  *usage `json:"usage"`
			Chunks int    `json:"chunks"`
		} `json:"chatStream"`
		Completion struct {
			Text  string `json:"text"`
			Usage usage  `json:"usage"`
		} `json:"completion"`
		CompletionStream struct {
			Text  string `json:"text"`
			Usage *usage `json:"usage"`
		} `json:"completionStream"`
		BadRequest apiErr `json:"badRequest"`
		BadModel   apiErr `json:"badModel"`
		Stop       struct {
			Word, Text, Finish string
		} `json:"stop"`
		N     []string `json:"n"`
		Tools struct {
			apiErr
			Finish, Name, Arguments string
		} `json:"tools"`
		BadStop apiErr `json:"badStop"`
		TooLong struct {
			apiErr
			Param string `json:"param"`
		} `json:"tooLong"`
	}
	node(t, "basic", url, nil, &out)

	if len(out.Models) != 1 || out.Models[0] != "qwen3-0.6b" {
		t.Errorf("models = %v, want [qwen3-0.6b]", out.Models)
	}
	if out.Chat.Text == "" || out.Chat.Usage.CompletionTokens != 12 || out.Chat.Finish != "length" {
		t.Errorf("chat = %+v, want text, 12 completion tokens, finish length", out.Chat)
	}
	// The chat prompt is ~400 words; the streamed repeat must find its full
	// blocks cached wherever the router sent it.
	full := out.Chat.Usage.PromptTokens / 16 * 16
	if u := out.ChatStream.Usage; u == nil || u.PromptTokensDetails.CachedTokens < full-16 {
		t.Errorf("streamed repeat usage = %+v, want cached_tokens ≥ %d (include_usage)", u, full-16)
	}
	// At high --speedup a chunk may carry several tokens; it must still
	// arrive as a stream, not one body.
	if out.ChatStream.Chunks < 3 {
		t.Errorf("chat stream had %d chunks, want several (content chunks plus usage)", out.ChatStream.Chunks)
	}
	if out.Completion.Usage.CompletionTokens != 8 || out.Completion.Text == "" {
		t.Errorf("completion = %+v, want 8 tokens of text", out.Completion)
	}
	if u := out.CompletionStream.Usage; u == nil || u.CompletionTokens != 8 || out.CompletionStream.Text != out.Completion.Text {
		t.Errorf("completion stream = %+v, want the same 8 tokens as non-streamed %q", out.CompletionStream, out.Completion.Text)
	}
	if out.BadRequest.Status != 400 || !strings.Contains(out.BadRequest.Message, "max_tokens") {
		t.Errorf("max_tokens -5 gave %+v, want 400 naming max_tokens", out.BadRequest)
	}
	if out.BadModel.Status != 404 {
		t.Errorf("unknown model gave %+v, want 404", out.BadModel)
	}
	// OpenAI fields: stop is honoured, n gives n choices, what the simulator
	// cannot do is refused by name, and a mistyped field is a 400.
	if i := strings.Index(out.Chat.Text, out.Stop.Word); out.Stop.Word == "" || i < 0 || out.Stop.Text != out.Chat.Text[:i] || out.Stop.Finish != "stop" {
		t.Errorf("stop %q on %q gave %q (%s), want the text before it and finish stop", out.Stop.Word, out.Chat.Text, out.Stop.Text, out.Stop.Finish)
	}
	if len(out.N) != 2 || out.N[0] == out.N[1] {
		t.Errorf("n=2 gave %q, want two different choices", out.N)
	}
	var city struct{ City string }
	if out.Tools.Status != 200 || out.Tools.Finish != "tool_calls" || out.Tools.Name != "get_weather" ||
		json.Unmarshal([]byte(out.Tools.Arguments), &city) != nil || city.City == "" {
		t.Errorf("tool_choice required gave %+v, want a get_weather call with a city", out.Tools)
	}
	if l := out.TooLong; l.Status != 400 || l.Param != "max_tokens" || !strings.Contains(l.Message, "This model's maximum context length is 40960 tokens. However, you requested") {
		t.Errorf("max_tokens 1000000 gave %+v, want 400 with vLLM's context-length message and param max_tokens", l)
	}
	if out.BadStop.Status != 400 || !strings.Contains(out.BadStop.Message, "stop") {
		t.Errorf("stop: 123 gave %+v, want 400 naming stop", out.BadStop)
	}
}

// TestWorkerKilledMidRun runs the frontend and three workers as separate
// processes, kills one during a streamed load, and checks that every
// failure reached the client as an error it can act on and that the rest
// of the run succeeded on the remaining workers.
func TestWorkerKilledMidRun(t *testing.T) {
	natsRe := regexp.MustCompile(`nats: (nats://[0-9.:]+)`)
	login := newNATSLogin(t) // the embedded NATS requires logins
	fe, _ := start(t, readyURL, "frontend", "--http-addr", "127.0.0.1:0", "--nats-addr", "127.0.0.1:0", "--registry-ttl", "2s", "--nats-secret-file", login.secretFile)
	var natsURL, url string
	eventually(t, 10*time.Second, "frontend prints its NATS and HTTP URLs", func() bool {
		o := fe.output()
		if m := natsRe.FindStringSubmatch(o); m != nil {
			natsURL = m[1]
		}
		if m := readyURL.FindStringSubmatch(o); m != nil {
			url = m[1]
		}
		return natsURL != "" && url != ""
	})
	var victim *proc
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("w%d", i)
		p, _ := start(t, readyURL, append([]string{"worker", "--nats", natsURL, "--registry-ttl", "2s", "--id", id, "--http-addr", "127.0.0.1:0"}, login.workerArgs(t, id)...)...)
		if i == 2 {
			victim = p
		}
	}
	eventually(t, 15*time.Second, "three healthy workers in /health", func() bool {
		var h struct {
			Status  string `json:"status"`
			Workers []any  `json:"workers"`
		}
		return getJSON(t, url+"/health", &h) == 200 && h.Status == "ok" && len(h.Workers) == 3
	})

	const n = 60
	o, _ := json.Marshal(map[string]any{"n": n, "concurrency": 4, "maxTokens": 96})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("client", "client.mjs"), "load", url, string(o))
	stderr, _ := cmd.StderrPipe()
	var stdout strings.Builder
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	done := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "done ") {
			done++
			if done == 12 {
				// Kill w2 while it is streaming, so the test sees what a
				// client sees when a worker dies mid-stream.
				eventually(t, 20*time.Second, "w2 has a request in flight", func() bool {
					var h struct {
						Workers []struct {
							ID       string `json:"id"`
							InFlight int    `json:"inflight"`
						} `json:"workers"`
					}
					getJSON(t, url+"/health", &h)
					for _, w := range h.Workers {
						if w.ID == "w2" && w.InFlight > 0 {
							return true
						}
					}
					return false
				})
				victim.kill()
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("node load: %v", err)
	}
	var res struct {
		Results []struct {
			OK      bool   `json:"ok"`
			Tokens  int    `json:"tokens"`
			Status  *int   `json:"status"`
			Message string `json:"message"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil {
		t.Fatalf("decode: %v\n%s", err, stdout.String())
	}
	failed := 0
	for i, r := range res.Results {
		switch {
		case r.OK && r.Tokens != 96:
			t.Errorf("request %d: ok with %d tokens, want 96", i, r.Tokens)
		case !r.OK:
			failed++
			if r.Message == "" {
				t.Errorf("request %d failed without a message", i)
			}
			t.Logf("request %d failed as the client saw it: status %v, %s", i, r.Status, r.Message)
		}
	}
	// Only streams in flight on the killed worker may fail: at most the
	// concurrency. Everything after them must succeed.
	if failed == 0 {
		// The kill can land while w2's requests are all before their first
		// byte (in flight, not yet streaming): the frontend then retries
		// them elsewhere and every client succeeds, which is right. Any
		// other way to lose no request is not.
		if r := metric(t, url, "switchyard_retries_total"); r == 0 {
			t.Errorf("no request failed and none was retried although w2 was killed with requests in flight")
		} else {
			t.Logf("the kill found w2's requests before their first byte: %v retried elsewhere, none failed", r)
		}
	}
	if failed > 4 {
		t.Errorf("%d of %d requests failed; want at most the 4 in flight when the worker died", failed, n)
	}
	for i := 24; i < n; i++ {
		if !res.Results[i].OK {
			t.Errorf("request %d after the kill failed: %s", i, res.Results[i].Message)
		}
	}
	t.Logf("killed w2 after 12 of %d requests: %d failed, %d succeeded", n, failed, n-failed)
}

// routingRun runs the field report's experiment against a fresh cluster
// and returns how many of the 60 requests hit the cache.
func routingRun(t *testing.T, args ...string) (hits int, url string) {
	t.Helper()
	url = up(t, append([]string{"--workers", "2", "--kv-blocks", "360", "--speedup", "20"}, args...)...)
	var out struct {
		PrefixTexts []string `json:"prefixTexts"`
		Rows        []struct {
			K      int    `json:"k"`
			Worker string `json:"worker"`
			Prompt int    `json:"prompt"`
			Cached int    `json:"cached"`
		} `json:"rows"`
	}
	node(t, "routing", url, map[string]any{"n": 60, "prefixes": 5, "prefixWords": 1500}, &out)
	tk, err := tokenizer.New()
	if err != nil {
		t.Fatal(err)
	}
	need := make([]int, len(out.PrefixTexts))
	for k, text := range out.PrefixTexts {
		shared := len(tk.Encode("<|im_start|>system\n" + text + "<|im_end|>\n<|im_start|>user\n"))
		need[k] = shared / 16 * 16 // the shared prefix's full blocks
	}
	for _, r := range out.Rows {
		if r.Cached >= need[r.K] {
			hits++
		}
	}
	if len(out.Rows) != 60 {
		t.Fatalf("got %d rows, want 60", len(out.Rows))
	}
	return hits, url
}

// TestFieldReportRoutingTable reproduces the field report's table: 60
// repeated-prefix requests, with the cache sized so that scattering costs.
func TestFieldReportRoutingTable(t *testing.T) {
	type row struct {
		name string
		args []string
		hits int
	}
	rows := []*row{
		{name: "kv", args: []string{"--router", "kv"}},
		{name: "round-robin", args: []string{"--router", "round-robin"}},
		{name: "random", args: []string{"--router", "random"}},
		{name: "kv, KV events off", args: []string{"--router", "kv", "--kv-events-off", "2"}},
		// The workers publish vLLM's ZMQ wire and join through bridges,
		// as real engines do: the bridges recompute every hash from the
		// engines' token_ids.
		{name: "kv, through vLLM-wire bridges", args: []string{"--router", "kv", "--engine-wire", "vllm"}},
		// And the frontend tokenizes on the engines (POST /tokenize).
		{name: "kv, bridges, --tokenizer engine", args: []string{"--router", "kv", "--engine-wire", "vllm", "--tokenizer", "engine"}},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var url string
			r.hits, url = routingRun(t, r.args...)
			if strings.Contains(r.name, "bridges") {
				// The hits must come from the engines' own events, not
				// from the approximate index.
				var h struct {
					Workers []struct {
						ID     string `json:"id"`
						Events struct {
							State  string `json:"state"`
							Blocks int    `json:"blocks"`
						} `json:"events"`
					} `json:"workers"`
				}
				getJSON(t, url+"/health", &h)
				if len(h.Workers) != 2 {
					t.Fatalf("/health lists %d workers, want 2", len(h.Workers))
				}
				for _, w := range h.Workers {
					if w.Events.State != "healthy" || w.Events.Blocks < 100 {
						t.Errorf("bridged worker %s: event state %q with %d blocks, want healthy with the run's blocks", w.ID, w.Events.State, w.Events.Blocks)
					}
				}
			}
			if strings.Contains(r.name, "off") {
				var h struct {
					Status  string `json:"status"`
					Workers []struct {
						ID     string `json:"id"`
						Events struct {
							State string `json:"state"`
						} `json:"events"`
					} `json:"workers"`
				}
				getJSON(t, url+"/health", &h)
				if h.Status != "degraded" {
					t.Errorf("/health status = %q with KV events off, want degraded", h.Status)
				}
				for _, w := range h.Workers {
					if w.Events.State != "disabled" {
						t.Errorf("worker %s event state = %q, want disabled", w.ID, w.Events.State)
					}
				}
			}
		})
	}
	t.Logf("\n| policy | cache hits (of 60) |\n|---|---|\n| %s | %d |\n| %s | %d |\n| %s | %d |\n| %s | %d |\n| %s | %d |\n| %s | %d |",
		rows[0].name, rows[0].hits, rows[1].name, rows[1].hits, rows[2].name, rows[2].hits, rows[3].name, rows[3].hits, rows[4].name, rows[4].hits, rows[5].name, rows[5].hits)
	if rows[0].hits != 60 {
		t.Errorf("kv: %d of 60 hits, want 60", rows[0].hits)
	}
	if rows[4].hits != 60 {
		t.Errorf("kv through bridges: %d of 60 hits, want 60", rows[4].hits)
	}
	if rows[5].hits != 60 {
		t.Errorf("kv through bridges with the engines tokenizing: %d of 60 hits, want 60", rows[5].hits)
	}
	if rows[1].hits >= 55 {
		t.Errorf("round-robin: %d of 60 hits; the cache is sized so scattering must cost", rows[1].hits)
	}
	if rows[3].hits < rows[2].hits+15 {
		t.Errorf("kv with events off: %d hits, want far above random's %d (approximate index)", rows[3].hits, rows[2].hits)
	}
}
