//go:build e2e

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

type apiRoute struct {
	Worker  string `json:"worker"`
	Source  string `json:"source"`
	Overlap int    `json:"overlap"`
	Policy  string `json:"policy"`
}

type apiFailure struct {
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`
}

// missing reports the members of got missing from want.
func missing(got, want []string) []string {
	var out []string
	for _, g := range got {
		if !slices.Contains(want, g) && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// inOrder reports whether want appears in got as a subsequence.
func inOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestAPIClients drives `switchyard up` with the official clients of the
// Responses API (openai) and the Messages API (@anthropic-ai/sdk),
// streaming and not: each answers and reports usage, a repeated long
// instructions or system prompt is served from cache on the worker the KV
// index found it on, the stream's events are the ones the SDK declares
// (and so are the golden transcripts'), previous_response_id continues on
// the worker that stored the response, and a bad request gets the API's
// own error shape.
func TestAPIClients(t *testing.T) {
	url := up(t, "--workers", "2", "--speedup", "50")

	t.Run("responses", func(t *testing.T) {
		type usage struct {
			Input   int `json:"input_tokens"`
			Output  int `json:"output_tokens"`
			Total   int `json:"total_tokens"`
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		}
		type answer struct {
			ID     string   `json:"id"`
			Status string   `json:"status"`
			Text   string   `json:"text"`
			Usage  *usage   `json:"usage"`
			Route  apiRoute `json:"route"`
			Types  []string `json:"types"`
		}
		var out struct {
			Declared []string `json:"declared"`
			Golden   []string `json:"golden"`
			Model    struct {
				ID string `json:"id"`
			} `json:"model"`
			First, Again, Stream, Next answer
			Bad                        apiFailure
		}
		node(t, "responses", url, map[string]any{"model": "qwen3-0.6b"}, &out)
		if out.Model.ID != "qwen3-0.6b" {
			t.Errorf("models.retrieve: %+v", out.Model)
		}
		for name, a := range map[string]answer{"first": out.First, "again": out.Again, "stream": out.Stream, "next": out.Next} {
			if a.Usage == nil || a.Usage.Input == 0 || a.Usage.Output == 0 || a.Usage.Total != a.Usage.Input+a.Usage.Output {
				t.Errorf("%s: usage %+v", name, a.Usage)
			}
			if a.Status != "completed" && a.Status != "incomplete" {
				t.Errorf("%s: status %q", name, a.Status)
			}
		}
		if out.First.Text == "" || out.Stream.Text == "" {
			t.Errorf("no text: first %q, stream %q", out.First.Text, out.Stream.Text)
		}
		for name, a := range map[string]answer{"again": out.Again, "stream": out.Stream} {
			if a.Route.Source != "index" || a.Route.Overlap < 1000 || a.Route.Worker != out.First.Route.Worker {
				t.Errorf("%s: routed %+v, want the first answer's worker %s found by the index with the instructions' >1000 tokens", name, a.Route, out.First.Route.Worker)
			}
			if a.Usage != nil && a.Usage.Details.Cached < 1000 {
				t.Errorf("%s: %d cached tokens, want the instructions served from cache", name, a.Usage.Details.Cached)
			}
		}
		want := []string{"response.created", "response.output_item.added", "response.content_part.added", "response.output_text.delta",
			"response.output_text.done", "response.output_item.done"}
		last := out.Stream.Types[len(out.Stream.Types)-1]
		if !inOrder(out.Stream.Types, want) || (last != "response.completed" && last != "response.incomplete") {
			t.Errorf("stream events %v, want %v in order and response.completed (or .incomplete) last", out.Stream.Types, want)
		}
		if len(out.Declared) < 20 {
			t.Fatalf("read only %d event types from the openai package's declarations: %v", len(out.Declared), out.Declared)
		}
		if m := missing(append(out.Stream.Types, out.Golden...), out.Declared); len(m) > 0 {
			t.Errorf("event types %v are not declared by the openai package", m)
		}
		if out.Next.Route.Policy != "previous_response" || out.Next.Route.Worker != out.First.Route.Worker {
			t.Errorf("previous_response_id routed %+v, want the worker that stored it, %s", out.Next.Route, out.First.Route.Worker)
		}
		var e struct {
			Type, Message string
		}
		if out.Bad.Status != 400 || json.Unmarshal(out.Bad.Body, &e) != nil || e.Type != "invalid_request_error" || !strings.Contains(e.Message, "null") {
			t.Errorf("content null: %d %s, want a 400 invalid_request_error", out.Bad.Status, out.Bad.Body)
		}
	})

	t.Run("messages", func(t *testing.T) {
		type usage struct {
			Input       int  `json:"input_tokens"`
			Output      int  `json:"output_tokens"`
			CacheRead   *int `json:"cache_read_input_tokens"`
			CacheCreate *int `json:"cache_creation_input_tokens"`
		}
		type answer struct {
			ID, Type, Role, Stop, Text string
			Usage                      *usage   `json:"usage"`
			Route                      apiRoute `json:"route"`
			Types                      []string `json:"types"`
			InputAtStart               int      `json:"inputAtStart"`
		}
		var out struct {
			Declared                    []string `json:"declared"`
			Golden                      []string `json:"golden"`
			First, Again, Stream, Final answer
			Count                       struct {
				InputTokens int `json:"input_tokens"`
			} `json:"count"`
			Bad apiFailure
		}
		node(t, "messages", url, map[string]any{"model": "qwen3-0.6b"}, &out)
		if out.First.Type != "message" || out.First.Role != "assistant" || !strings.HasPrefix(out.First.ID, "msg_") || out.First.Text == "" {
			t.Errorf("first message %+v", out.First)
		}
		for name, a := range map[string]answer{"first": out.First, "again": out.Again, "stream": out.Stream, "final": out.Final} {
			if a.Usage == nil || a.Usage.Input == 0 || a.Usage.Output == 0 || a.Usage.CacheRead == nil || a.Usage.CacheCreate == nil {
				t.Errorf("%s: usage %+v", name, a.Usage)
			}
			if a.Stop != "max_tokens" && a.Stop != "end_turn" {
				t.Errorf("%s: stop_reason %q", name, a.Stop)
			}
		}
		prompt := out.First.Usage.Input + *out.First.Usage.CacheRead
		if out.Count.InputTokens != prompt {
			t.Errorf("count_tokens %d, want the first prompt's %d tokens", out.Count.InputTokens, prompt)
		}
		for name, a := range map[string]answer{"again": out.Again, "stream": out.Stream} {
			if a.Route.Source != "index" || a.Route.Overlap < 1000 || a.Route.Worker != out.First.Route.Worker {
				t.Errorf("%s: routed %+v, want the first answer's worker %s found by the index with the system prompt's >1000 tokens", name, a.Route, out.First.Route.Worker)
			}
			if a.Usage != nil && (a.Usage.CacheRead == nil || *a.Usage.CacheRead < 1000) {
				t.Errorf("%s: usage %+v, want the system prompt read from cache", name, a.Usage)
			}
		}
		want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
		if !inOrder(out.Stream.Types, want) || out.Stream.Types[len(out.Stream.Types)-1] != "message_stop" || out.Stream.Text == "" || out.Stream.InputAtStart == 0 {
			t.Errorf("stream %+v, want events %v in order, text and input tokens at message_start", out.Stream, want)
		}
		if len(out.Declared) != 6 {
			t.Fatalf("read %v from the SDK's RawMessageStreamEvent declarations, want its 6 event types", out.Declared)
		}
		// ping is not a message event: the SDK's stream reader skips it.
		if m := missing(append(out.Stream.Types, out.Golden...), append(out.Declared, "ping")); len(m) > 0 {
			t.Errorf("event types %v are not declared by @anthropic-ai/sdk", m)
		}
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if out.Bad.Status != 400 || json.Unmarshal(out.Bad.Body, &e) != nil || e.Type != "error" || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
			t.Errorf("max_tokens 0: %d %s, want a 400 in Anthropic's error shape", out.Bad.Status, out.Bad.Body)
		}
	})
}

// TestPreviousResponseAcrossReplicas: a response stored through one
// frontend is continued through its peer on the worker that stored it,
// whichever worker the peer's router would pick; once that worker is
// gone, the continuation is a 400 naming it.
func TestPreviousResponseAcrossReplicas(t *testing.T) {
	login := newNATSLogin(t)
	_, fe1, natsURL := startFrontend(t, login, "")
	_, fe2, _ := startFrontend(t, login, natsURL, "--replica-id", "fe-2")
	workers := map[string]*proc{}
	for _, id := range []string{"w1", "w2"} {
		p, _ := start(t, readyURL, append([]string{"worker", "--nats", natsURL, "--registry-ttl", "2s", "--id", id,
			"--http-addr", "127.0.0.1:0", "--kv-blocks", "600", "--speedup", "50", "--log-level", "warn"},
			login.workerArgs(t, id)...)...)
		workers[id] = p
	}
	for _, u := range []string{fe1, fe2} {
		eventually(t, 15*time.Second, "both frontends see both workers", func() bool {
			var h struct {
				Workers []any `json:"workers"`
			}
			getJSON(t, u+"/health", &h)
			return len(h.Workers) == 2
		})
	}
	eventually(t, 5*time.Second, "the frontends see each other", func() bool {
		var c struct {
			Replicas struct {
				Peers []struct{ ID string } `json:"peers"`
			} `json:"replicas"`
		}
		getJSON(t, fe1+"/admin/cluster", &c)
		return len(c.Replicas.Peers) == 1
	})
	post := func(url, body string) (int, http.Header, []byte) {
		t.Helper()
		resp, err := http.Post(url+"/v1/responses", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	code, h, b := post(fe1, `{"model":"qwen3-0.6b","max_output_tokens":4,"input":"remember car 7"}`)
	var first struct{ ID string }
	if code != 200 || json.Unmarshal(b, &first) != nil || first.ID == "" {
		t.Fatalf("first response: %d %s", code, b)
	}
	stored := h.Get("x-switchyard-worker")
	next := `{"model":"qwen3-0.6b","max_output_tokens":4,"previous_response_id":"` + first.ID + `","input":"which car?"}`
	// Several continuations through the peer: each must go to the storing
	// worker, though with two idle workers a router would spread them.
	for i := 0; i < 4; i++ {
		var code int
		var h http.Header
		eventually(t, 5*time.Second, "the peer learns the stored response", func() bool {
			code, h, b = post(fe2, next)
			return code != 400
		})
		if code != 200 || h.Get("x-switchyard-worker") != stored || h.Get("x-switchyard-policy") != "previous_response" {
			t.Fatalf("continuation %d through the peer: %d on %q (policy %q), want 200 on %s: %s", i, code, h.Get("x-switchyard-worker"), h.Get("x-switchyard-policy"), stored, b)
		}
	}
	workers[stored].kill()
	eventually(t, 15*time.Second, "the continuation says the storing worker is gone", func() bool {
		code, _, b = post(fe2, next)
		return code == 400 && strings.Contains(string(b), stored+", which is gone")
	})
}
