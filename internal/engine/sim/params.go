package sim

import (
	"bytes"
	"encoding/json"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// What the simulated engine does with each OpenAI request field:
//
//   - honoured: max_tokens, max_completion_tokens, min_tokens, ignore_eos,
//     stop (strings or a list; the matched stop is cut from the text and the
//     choice finishes with "stop"), seed (same seed, same text), n (each
//     choice its own text; the prompt is counted once in usage), stream,
//     stream_options, cache_salt, kv_transfer_params;
//   - accepted and validated, with nothing to act on: the sampling shape
//     (temperature, top_p, top_k, min_p, presence_penalty,
//     frequency_penalty, repetition_penalty), which shapes a model's token
//     distribution that synthetic text does not have, and the bookkeeping
//     fields user and parallel_tool_calls;
//   - refused with a 400 naming the field when set to ask for something:
//     logprobs, top_logprobs, tools, tool_choice, response_format other
//     than text, logit_bias, echo, suffix, best_of above n, priority, and
//     any field it does not know. A real engine behind the same frontend
//     gets all of them: the frontend forwards bodies untouched.

// notSupported is the 400 for a field the simulated engine cannot honour.
func notSupported(field, why string) *apiError {
	return badRequest(field, "the simulated engine does not support %q: %s; remove it, or serve this model with a real engine (the frontend forwards it untouched)", field, why)
}

// unsupported returns the error for the first field that asks for
// something the simulated engine cannot do, or nil.
func unsupported(req *openai.CompletionRequest, chat bool) *apiError {
	set := func(b json.RawMessage) bool {
		b = bytes.TrimSpace(b)
		return len(b) > 0 && !bytes.Equal(b, []byte("null"))
	}
	if set(req.Logprobs) && !bytes.Equal(bytes.TrimSpace(req.Logprobs), []byte("false")) {
		return notSupported("logprobs", "its text is synthetic, with no token probabilities to report")
	}
	if req.TopLogprobs != nil && *req.TopLogprobs > 0 {
		return notSupported("top_logprobs", "its text is synthetic, with no token probabilities to report")
	}
	if !chat && set(req.Tools) && !bytes.Equal(bytes.TrimSpace(req.Tools), []byte("[]")) {
		return notSupported("tools", "it calls tools in chat completions only")
	}
	if !chat && set(req.ToolChoice) {
		var s string
		if json.Unmarshal(req.ToolChoice, &s) != nil || (s != "none" && s != "auto") {
			return notSupported("tool_choice", "it cannot call tools")
		}
	}
	if set(req.ResponseFormat) {
		var rf struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(req.ResponseFormat, &rf) != nil || rf.Type != "text" {
			return notSupported("response_format", "it cannot constrain its text to a format")
		}
	}
	if len(req.LogitBias) > 0 {
		return notSupported("logit_bias", "its text is synthetic, with no logits to bias")
	}
	if req.Echo != nil && *req.Echo {
		return notSupported("echo", "it does not echo prompts")
	}
	if req.Suffix != nil && *req.Suffix != "" {
		return notSupported("suffix", "it does not insert text")
	}
	for _, m := range req.Modalities {
		if m != "text" {
			return notSupported("modalities", "it generates text only")
		}
	}
	if set(req.Audio) {
		return notSupported("audio", "it generates text only")
	}
	n := 1
	if req.N != nil {
		n = *req.N
	}
	if req.BestOf != nil && *req.BestOf > n {
		return notSupported("best_of", "it generates exactly n choices")
	}
	if req.Priority != nil && *req.Priority != 0 {
		return notSupported("priority", "it schedules first come, first served")
	}
	return nil
}

// choice is one of a request's n generations, as the handler reads it.
type choice struct {
	st   *Stream
	stop *stopMatcher // nil without stop sequences
	text []byte       // decoded output so far
	sent int          // bytes of text already streamed
	done bool
}

// ready returns the text that can be streamed now: while the choice runs,
// all but the bytes that could still begin a stop sequence; once it is
// done, everything up to the matched stop, if any.
func (c *choice) ready(done bool) []byte {
	end := len(c.text)
	switch {
	case done:
		end = len(c.final())
	case c.stop != nil:
		end -= c.stop.maxLen - 1
	}
	if end <= c.sent {
		return nil
	}
	out := c.text[c.sent:end]
	c.sent = end
	return out
}

// final is the choice's whole text, without the matched stop sequence and
// anything after it. Call it once the stream reported done.
func (c *choice) final() []byte {
	if c.stop != nil && c.stop.cut >= 0 && c.stop.cut <= len(c.text) {
		return c.text[:c.stop.cut]
	}
	return c.text
}

// stopMatcher finds the first stop sequence in a request's output text, as
// vLLM does: only sequences that end in the text of the newest token count,
// so the engine asks from min_tokens on and a stop inside the first
// min_tokens tokens is not matched.
//
// The engine calls feed on its goroutine with its lock held; the handler
// reads cut only after the stream reported done, which that lock orders
// after the last feed.
type stopMatcher struct {
	tok    interface{ Decode([]uint32) string }
	stops  [][]byte
	maxLen int
	text   []byte // decoded output
	fed    int    // output tokens decoded into text
	cut    int    // where the matched stop begins in text; -1 until one matches
	// matched is the index in stops of the sequence cut at; -1 until one
	// matches.
	matched int
}

func newStopMatcher(tok interface{ Decode([]uint32) string }, stops []string) *stopMatcher {
	m := &stopMatcher{tok: tok, cut: -1, matched: -1}
	for _, s := range stops {
		m.stops = append(m.stops, []byte(s))
		m.maxLen = max(m.maxLen, len(s))
	}
	return m
}

// feed implements Request.Stop.
func (m *stopMatcher) feed(out []uint32) bool {
	if len(out) == 0 {
		return false
	}
	if m.fed < len(out)-1 {
		m.text = append(m.text, m.tok.Decode(out[m.fed:len(out)-1])...)
	}
	from := len(m.text)
	m.text = append(m.text, m.tok.Decode(out[len(out)-1:])...)
	m.fed = len(out)
	best, which := -1, -1
	for k, s := range m.stops {
		start := max(0, from-len(s)+1)
		if i := bytes.Index(m.text[start:], s); i >= 0 && (best < 0 || start+i < best) {
			best, which = start+i, k
		}
	}
	if best < 0 {
		return false
	}
	m.cut, m.matched = best, which
	return true
}

// stopReason is vLLM's stop_reason of a finished choice: the stop
// sequence that ended its text, or nil.
func (c *choice) stopReason() any {
	if c.stop == nil || c.stop.cut < 0 || c.stop.matched < 0 {
		return nil
	}
	return string(c.stop.stops[c.stop.matched])
}
