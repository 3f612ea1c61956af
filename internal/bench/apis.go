package bench

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// The APIs bench can drive (--api).
const (
	APICompletions = "completions"
	APIChat        = "chat"
	APIMessages    = "messages"
	APIResponses   = "responses"
)

// APIs lists them, for flag help and validation.
var APIs = []string{APICompletions, APIChat, APIMessages, APIResponses}

var apiPaths = map[string]string{
	APICompletions: "/v1/completions",
	APIChat:        "/v1/chat/completions",
	APIMessages:    "/v1/messages",
	APIResponses:   "/v1/responses",
}

// textTokenizer decodes the generated token IDs into the text the chat
// APIs send; cl100k, as the IDs are drawn from its vocabulary.
var textTokenizer = sync.OnceValues(tokenizer.New)

// appendTextBody writes a request of c.api with the prompt as one user
// turn: the text prompt decodes to. The frontend tokenizes it again
// through the chat template, so the prompt the deployment sees is longer
// by the template's tokens and, where a token boundary moves, differs
// slightly; shared prefixes stay shared, as their text is the same.
func (c *Client) appendTextBody(dst []byte, prompt []uint32, maxTokens int) []byte {
	var text string
	if t, err := textTokenizer(); err == nil {
		text = t.Decode(prompt)
	}
	q, _ := json.Marshal(text)
	dst = append(dst, `{"model":`...)
	dst = append(dst, c.modelJSON()...)
	switch c.api {
	case APIResponses:
		dst = append(dst, `,"input":`...)
		dst = append(dst, q...)
		dst = append(dst, `,"max_output_tokens":`...)
		dst = strconv.AppendInt(dst, int64(maxTokens), 10)
		return append(dst, `,"stream":true}`...)
	case APIMessages:
		dst = append(dst, `,"max_tokens":`...)
		dst = strconv.AppendInt(dst, int64(maxTokens), 10)
		dst = append(dst, `,"stream":true,"messages":[{"role":"user","content":`...)
		dst = append(dst, q...)
		return append(dst, `}]}`...)
	}
	dst = append(dst, `,"messages":[{"role":"user","content":`...)
	dst = append(dst, q...)
	dst = append(dst, `}],"max_tokens":`...)
	dst = strconv.AppendInt(dst, int64(maxTokens), 10)
	return append(dst, `,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`...)
}

var (
	textDeltaType   = []byte(`"content_block_delta"`)
	outputDeltaType = []byte(`"response.output_text.delta"`)
)

// hasText reports whether payload carries generated text: for the
// Messages and Responses APIs only their text delta events do (their
// done events repeat the text).
func (c *Client) hasText(payload []byte) bool {
	switch c.api {
	case APIMessages:
		if !bytes.Contains(payload, textDeltaType) {
			return false
		}
		v, ok := jsonValue(payload, "text")
		return ok && len(v) >= 2 && v[0] == '"' && v[1] != '"'
	case APIResponses:
		if !bytes.Contains(payload, outputDeltaType) {
			return false
		}
		v, ok := jsonValue(payload, "delta")
		return ok && len(v) >= 2 && v[0] == '"' && v[1] != '"'
	}
	return hasText(payload)
}

// usage records the usage of a Messages or Responses stream's last event.
func (c *Client) usage(payload []byte, rec *Record) {
	var u openai.Usage
	switch c.api {
	case APIMessages:
		// message_stop carries none: message_delta did, read as it came.
		return
	case APIResponses:
		var ev struct {
			Response struct {
				Usage *openai.ResponsesUsage `json:"usage"`
			} `json:"response"`
		}
		if json.Unmarshal(payload, &ev) != nil || ev.Response.Usage == nil {
			return
		}
		u = ev.Response.Usage.Usage()
	}
	rec.PromptTokens, rec.CompletionTokens, rec.CachedTokens = u.PromptTokens, u.CompletionTokens, u.PromptTokensDetails.CachedTokens
}

// messageUsage records a message_delta's usage.
func messageUsage(payload []byte, rec *Record) {
	var ev struct {
		Usage *openai.AnthropicUsage `json:"usage"`
	}
	if json.Unmarshal(payload, &ev) != nil || ev.Usage == nil {
		return
	}
	u := ev.Usage.Usage()
	rec.PromptTokens, rec.CompletionTokens, rec.CachedTokens = u.PromptTokens, u.CompletionTokens, u.PromptTokensDetails.CachedTokens
}
