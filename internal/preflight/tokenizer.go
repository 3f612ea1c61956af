package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// The tokenizer check: the frontend routes by its own token ids, and the
// engines' KV events carry theirs; if they differ by one token, every
// block hash after it differs and routing is silently random. So the same
// prompt and the same chat go to the frontend's POST /tokenize and to each
// worker's (vLLM's endpoint, also served by the simulator), and any
// difference is a FAIL naming the first differing position.

// Tokenizer probes: text that stresses pre-tokenization (accents, CJK,
// emoji with ZWJ and skin tone, digit runs, code, tabs, \r\n, trailing
// spaces) and a multi-turn chat with a system prompt.
const tokenizerProbeText = "Preflight tokenizer check: naïve café — 日本語のテキスト, 12345678, emoji 👍🏽👨‍👩‍👧, code `x := f(1)`;\r\n\tindented  and trailing spaces   "

var tokenizerProbeChat = []openai.Message{
	{Role: "system", Content: "You are a careful assistant."},
	{Role: "user", Content: "Compare 3.14159 and 2.71828.\nExplain briefly."},
	{Role: "assistant", Content: "Sure: π is larger."},
	{Role: "user", Content: "Thanks! 🙏  "},
}

// messagesProbe is tokenizerProbeChat as a Messages API request: the
// system turn at the top, the rest as messages.
func messagesProbe(model string) map[string]any {
	msgs := make([]map[string]string, 0, len(tokenizerProbeChat)-1)
	for _, m := range tokenizerProbeChat[1:] {
		msgs = append(msgs, map[string]string{"role": m.Role, "content": m.Content})
	}
	return map[string]any{"model": model, "system": tokenizerProbeChat[0].Content, "messages": msgs}
}

// TokenizerProbe is one probe (prompt or chat) on one worker.
type TokenizerProbe struct {
	Worker         string `json:"worker"`
	Probe          string `json:"probe"` // "prompt" or "chat"
	Status         Status `json:"status"`
	FrontendTokens int    `json:"frontend_tokens"`
	WorkerTokens   int    `json:"worker_tokens"`
	// FirstDiff is the first position where the ids differ (-1: equal).
	FirstDiff int    `json:"first_diff"`
	Detail    string `json:"detail,omitempty"`
}

type tokenizeProbe struct {
	name string
	req  openai.TokenizeRequest
}

func tokenizerProbes() []tokenizeProbe {
	text := tokenizerProbeText
	return []tokenizeProbe{
		{"prompt", openai.TokenizeRequest{Prompt: &text, ReturnTokenStrs: true}},
		{"chat", openai.TokenizeRequest{Messages: tokenizerProbeChat, ReturnTokenStrs: true}},
	}
}

func (r *runner) checkTokenizer(ctx context.Context) Check {
	ch := Check{Name: CheckTokenizer, Status: Pass, Tokenizer: []TokenizerProbe{}}
	probes := tokenizerProbes()
	front := make([]openai.TokenizeResponse, len(probes))
	for i, p := range probes {
		req := p.req
		req.Model = r.dep.Model
		if err := r.c.call(ctx, http.MethodPost, "/tokenize", false, req, &front[i], 0); err != nil {
			ch.Status = Fail
			ch.Summary = "the frontend's tokenizer cannot be read"
			ch.Problems = append(ch.Problems, fmt.Sprintf("frontend: POST /tokenize: %v", err))
			return ch
		}
	}
	// The same chat as a Messages API request: the frontend renders it
	// into chat turns to route it, so its count must be the chat's, which
	// is compared with each worker's below. A frontend without the
	// endpoint is older than the API and routes no such request.
	messagesTokens := -1
	var counted struct {
		InputTokens int `json:"input_tokens"`
	}
	switch err := r.c.call(ctx, http.MethodPost, "/v1/messages/count_tokens", false, messagesProbe(r.dep.Model), &counted, 0); {
	case errors.Is(err, errNoEndpoint):
	case err != nil:
		ch.Status = worst(ch.Status, Warn)
		ch.Problems = append(ch.Problems, fmt.Sprintf("frontend: POST /v1/messages/count_tokens: %v", err))
	case counted.InputTokens != front[1].Count:
		ch.Status = Fail
		ch.Problems = append(ch.Problems, fmt.Sprintf("frontend: the probe chat as a Messages request counts %d tokens, as a chat %d: "+
			"Messages requests would not route to the prefixes their chat equivalents cached", counted.InputTokens, front[1].Count))
	default:
		messagesTokens = counted.InputTokens
	}
	checked, unverified := 0, 0
	for _, w := range r.dep.Workers {
		if w.URL == "" {
			unverified++
			ch.Problems = append(ch.Problems, fmt.Sprintf("%s: /health gave no address, so its tokenizer cannot be compared (pass --admin-key)", w.ID))
			ch.Status = worst(ch.Status, Warn)
			continue
		}
		for i, p := range probes {
			req := p.req
			req.Model = w.Model
			pr := TokenizerProbe{Worker: w.ID, Probe: p.name, FrontendTokens: front[i].Count, FirstDiff: -1}
			var got openai.TokenizeResponse
			err := r.c.postURL(ctx, strings.TrimRight(w.URL, "/")+"/tokenize", req, &got)
			var nf *notFound
			switch {
			case errors.As(err, &nf):
				pr.Status = Warn
				pr.Detail = "the worker does not serve POST /tokenize"
				ch.Problems = append(ch.Problems, fmt.Sprintf("%s: no POST /tokenize (vLLM serves it): its tokenizer cannot be compared", w.ID))
			case err != nil:
				pr.Status = Fail
				pr.Detail = err.Error()
				ch.Problems = append(ch.Problems, fmt.Sprintf("%s: %s: %v", w.ID, p.name, err))
			default:
				pr.WorkerTokens = got.Count
				pr.FirstDiff = firstDiff(front[i].Tokens, got.Tokens)
				pr.Status = Pass
				if pr.FirstDiff >= 0 {
					pr.Status = Fail
					pr.Detail = diffDetail(front[i], got, pr.FirstDiff)
					ch.Problems = append(ch.Problems, fmt.Sprintf("%s: %s: the frontend's token ids differ from the worker's at position %d (%s); "+
						"prefix hashes from there on will never match the engine's: start the frontend with the model's tokenizer (--tokenizer PATH|ORG/NAME) or --tokenizer engine",
						w.ID, p.name, pr.FirstDiff, pr.Detail))
				}
			}
			ch.Status = worst(ch.Status, pr.Status)
			ch.Tokenizer = append(ch.Tokenizer, pr)
		}
		checked++
	}
	switch ch.Status {
	case Pass:
		ch.Summary = fmt.Sprintf("the frontend's token ids equal each worker's on a prompt (%d tokens) and a chat (%d tokens), %d workers", front[0].Count, front[1].Count, checked)
		if messagesTokens >= 0 {
			ch.Summary += "; the chat as a Messages request renders to the same tokens"
		}
	case Warn:
		ch.Summary = fmt.Sprintf("%d workers could not be compared", unverified+countStatus(ch.Tokenizer, Warn)/len(probes))
	default:
		ch.Summary = "the frontend tokenizes differently from a worker: routing keys will not match the engines' KV events"
	}
	return ch
}

func countStatus(ps []TokenizerProbe, s Status) int {
	n := 0
	for _, p := range ps {
		if p.Status == s {
			n++
		}
	}
	return n
}

// firstDiff is the first index where a and b differ, or -1.
func firstDiff(a, b []uint32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return n
	}
	return -1
}

func diffDetail(front, worker openai.TokenizeResponse, i int) string {
	side := func(r openai.TokenizeResponse) string {
		if i >= len(r.Tokens) {
			return "end"
		}
		if i < len(r.TokenStrs) {
			return fmt.Sprintf("%d %q", r.Tokens[i], r.TokenStrs[i])
		}
		return fmt.Sprint(r.Tokens[i])
	}
	return fmt.Sprintf("frontend %s, worker %s; %d vs %d tokens", side(front), side(worker), front.Count, worker.Count)
}

// notFound is a 404 from a worker.
type notFound struct{ what string }

func (e *notFound) Error() string { return e.what + ": HTTP 404" }

// postURL posts body as JSON to an absolute URL (a worker's) and decodes
// a 200 answer into out.
func (c *client) postURL(ctx context.Context, url string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportError("POST "+url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("POST %s: read body: %w", url, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return &notFound{what: "POST " + url}
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(string(data))
		var e openai.ErrorResponse
		if json.Unmarshal(data, &e) == nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return fmt.Errorf("POST %s: HTTP %d: %s", url, resp.StatusCode, msg)
	}
	return json.Unmarshal(data, out)
}
