// Package openai holds the OpenAI wire format shared by the frontend, the
// simulated worker and the load client: request and response types, the SSE
// writer and reader, and the error envelope. It holds no logic and imports
// nothing else of the project.
package openai

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// Message is one chat turn. On decode, content may be a string, null, or
// an array of content parts; text parts are joined with "\n" (as vLLM's
// chat template preparation does) and any other part type is rejected
// with a *ContentPartError. It always encodes content as a string.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// NoContent: content was null or absent, which only an assistant
	// turn (one carrying tool calls) may be; CheckRoles refuses it
	// otherwise, as the OpenAI API does.
	NoContent bool `json:"-"`
}

// ContentPartError reports a chat content part of a type the project does
// not serve (image_url, input_audio, file, ...).
type ContentPartError struct {
	Type string // the part's "type", possibly empty
}

func (e *ContentPartError) Error() string {
	return fmt.Sprintf("openai: message content part of type %q is not supported; only \"text\" parts are", e.Type)
}

// UnmarshalJSON implements json.Unmarshaler.
func (m *Message) UnmarshalJSON(b []byte) error {
	// Content decodes as any in the same pass as the role: a RawMessage
	// followed by a second Unmarshal scanned a long prompt twice more, on
	// the frontend's hot path.
	var raw struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	m.Role, m.Content, m.NoContent = raw.Role, "", raw.Content == nil
	return m.setContent(raw.Content, b)
}

// contentType names what content must be in type errors (a nil Type
// makes UnmarshalTypeError.Error panic).
var contentType = reflect.TypeFor[string]()

// setContent sets m.Content from a decoded content value: nil, a string,
// or text parts. b is the message, for the type error.
func (m *Message) setContent(content any, b []byte) error {
	switch c := content.(type) {
	case nil:
		return nil
	case string:
		m.Content = c
		return nil
	case []any:
		var sb strings.Builder
		for i, part := range c {
			p, ok := part.(map[string]any)
			if !ok {
				return &json.UnmarshalTypeError{Value: "content part that is not an object", Field: "content", Type: contentType}
			}
			typ, _ := p["type"].(string)
			text, isText := p["text"].(string)
			if typ != "text" {
				return &ContentPartError{Type: typ}
			}
			if !isText {
				return &json.UnmarshalTypeError{Value: "text part without text", Field: "content", Type: contentType}
			}
			if i > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(text)
		}
		m.Content = sb.String()
		return nil
	default:
		return &json.UnmarshalTypeError{Value: string(truncate(b, 32)), Field: "content", Type: contentType}
	}
}

// StreamOptions is the request's stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Prompt is a completions prompt: either text or token IDs. Exactly one of
// Text and Tokens is set after a successful decode.
type Prompt struct {
	Text     string
	Tokens   []uint32
	IsTokens bool
}

// UnmarshalJSON accepts a string, an array of integer token IDs, or a
// one-element array of strings (as the OpenAI API allows).
func (p *Prompt) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*p = Prompt{Text: s}
		return nil
	}
	var toks []uint32
	if err := json.Unmarshal(b, &toks); err == nil {
		*p = Prompt{Tokens: toks, IsTokens: true}
		return nil
	}
	var ss []string
	if err := json.Unmarshal(b, &ss); err == nil {
		if len(ss) == 1 {
			*p = Prompt{Text: ss[0]}
			return nil
		}
		return &PromptError{Msg: fmt.Sprintf("prompt: an array of %d strings (batched prompts) is not supported; send one prompt per request", len(ss))}
	}
	return &PromptError{Msg: fmt.Sprintf("prompt: %s is neither a string nor an array of token IDs", truncate(b, 32))}
}

// PromptError is a prompt that does not decode; the message says why.
type PromptError struct{ Msg string }

func (e *PromptError) Error() string { return e.Msg }

// MarshalJSON writes the prompt back in the form it came in.
func (p Prompt) MarshalJSON() ([]byte, error) {
	if p.IsTokens {
		if p.Tokens == nil {
			return []byte("[]"), nil
		}
		return json.Marshal(p.Tokens)
	}
	return json.Marshal(p.Text)
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// CompletionRequest is the body of POST /v1/completions and, with Messages
// set instead of Prompt, of POST /v1/chat/completions. It names every field
// of the OpenAI API and vLLM's common extensions, so that decoding checks
// their types and CheckParams their ranges; the frontend forwards the body
// itself, untouched, so fields not named here still reach the engine.
type CompletionRequest struct {
	Model         string         `json:"model"`
	Prompt        *Prompt        `json:"prompt,omitempty"`
	Messages      []Message      `json:"messages,omitempty"`
	MaxTokens     *int           `json:"max_tokens,omitempty"`
	MaxCompletion *int           `json:"max_completion_tokens,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	Temperature   *float64       `json:"temperature,omitempty"`
	TopP          *float64       `json:"top_p,omitempty"`
	Seed          *int64         `json:"seed,omitempty"`
	Stop          Stop           `json:"stop,omitempty"`
	User          string         `json:"user,omitempty"`
	N             *int           `json:"n,omitempty"`

	// Generation controls checked by CheckParams; Logprobs is a bool in
	// chat requests and an integer in completions requests.
	Logprobs         json.RawMessage    `json:"logprobs,omitempty"`
	TopLogprobs      *int               `json:"top_logprobs,omitempty"`
	PresencePenalty  *float64           `json:"presence_penalty,omitempty"`
	FrequencyPenalty *float64           `json:"frequency_penalty,omitempty"`
	LogitBias        map[string]float64 `json:"logit_bias,omitempty"`
	ResponseFormat   json.RawMessage    `json:"response_format,omitempty"`
	Tools            json.RawMessage    `json:"tools,omitempty"`
	ToolChoice       json.RawMessage    `json:"tool_choice,omitempty"`
	ParallelTools    *bool              `json:"parallel_tool_calls,omitempty"`
	Echo             *bool              `json:"echo,omitempty"`
	Suffix           *string            `json:"suffix,omitempty"`
	BestOf           *int               `json:"best_of,omitempty"`

	// Standard fields that change nothing an engine computes (or, audio
	// and modalities, ask for output only some models give): named so that
	// a strict decoder, the simulated engine's, accepts them as the OpenAI
	// API does.
	Store            *bool             `json:"store,omitempty"`
	Metadata         map[string]string `json:"metadata,omitempty"`
	ServiceTier      *string           `json:"service_tier,omitempty"`
	ReasoningEffort  *string           `json:"reasoning_effort,omitempty"`
	Verbosity        *string           `json:"verbosity,omitempty"`
	Modalities       []string          `json:"modalities,omitempty"`
	Audio            json.RawMessage   `json:"audio,omitempty"`
	Prediction       json.RawMessage   `json:"prediction,omitempty"`
	WebSearchOptions json.RawMessage   `json:"web_search_options,omitempty"`
	PromptCacheKey   *string           `json:"prompt_cache_key,omitempty"`
	SafetyIdentifier *string           `json:"safety_identifier,omitempty"`

	// vLLM extensions.
	CacheSalt string `json:"cache_salt,omitempty"`
	// Chat-template switches (vLLM): they change a chat's prompt tokens.
	AddGenerationPrompt  *bool          `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage bool           `json:"continue_final_message,omitempty"`
	ChatTemplateKwargs   map[string]any `json:"chat_template_kwargs,omitempty"`
	KVTransferParams     map[string]any `json:"kv_transfer_params,omitempty"`
	Priority             *int           `json:"priority,omitempty"`
	MinTokens            *int           `json:"min_tokens,omitempty"`
	IgnoreEOS            bool           `json:"ignore_eos,omitempty"`
	TopK                 *int           `json:"top_k,omitempty"`
	MinP                 *float64       `json:"min_p,omitempty"`
	RepetitionPenalty    *float64       `json:"repetition_penalty,omitempty"`
}

// PromptTokensDetails is usage.prompt_tokens_details.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
	// KVTiers is Switchyard's extension: CachedTokens split by the KV tier
	// they came from and what loading the lower tiers cost. Set by the
	// simulated engine when it has lower tiers; absent otherwise.
	KVTiers *KVTiers `json:"switchyard_kv_tiers,omitempty"`
}

// KVTiers is usage.prompt_tokens_details.switchyard_kv_tiers.
type KVTiers struct {
	GPUTokens       int     `json:"gpu_tokens"`
	CPUTokens       int     `json:"cpu_tokens"`
	DiskTokens      int     `json:"disk_tokens"`
	CPULoadedBytes  int64   `json:"cpu_loaded_bytes"`
	DiskLoadedBytes int64   `json:"disk_loaded_bytes"`
	LoadMs          float64 `json:"load_ms"` // simulated time until the lower-tier prefix was in GPU memory
}

// Usage is the token accounting of one request.
type Usage struct {
	PromptTokens        int                  `json:"prompt_tokens"`
	CompletionTokens    int                  `json:"completion_tokens"`
	TotalTokens         int                  `json:"total_tokens"`
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// CompletionChoice is one choice of a text completion (full or chunk).
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	FinishReason *string `json:"finish_reason"`
	Logprobs     any     `json:"logprobs"`
}

// CompletionResponse is a text_completion object, used both for the full
// response and for each streamed chunk.
type CompletionResponse struct {
	ID               string             `json:"id"`
	Object           string             `json:"object"` // "text_completion"
	Created          int64              `json:"created"`
	Model            string             `json:"model"`
	Choices          []CompletionChoice `json:"choices"`
	Usage            *Usage             `json:"usage"`
	KVTransferParams map[string]any     `json:"kv_transfer_params,omitempty"`
}

// ChatChoice is one choice of a full chat completion.
type ChatChoice struct {
	Index        int     `json:"index"`
	Message      Message `json:"message"`
	FinishReason *string `json:"finish_reason"`
	Logprobs     any     `json:"logprobs"`
	// StopReason is vLLM's: the stop sequence that ended the text; absent
	// otherwise.
	StopReason any `json:"stop_reason,omitempty"`
}

// ChatResponse is a chat.completion object.
type ChatResponse struct {
	ID               string         `json:"id"`
	Object           string         `json:"object"` // "chat.completion"
	Created          int64          `json:"created"`
	Model            string         `json:"model"`
	Choices          []ChatChoice   `json:"choices"`
	Usage            *Usage         `json:"usage"`
	KVTransferParams map[string]any `json:"kv_transfer_params,omitempty"`
}

// Delta is the incremental message of a chat chunk.
type Delta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// ChatChunkChoice is one choice of a chat.completion.chunk.
type ChatChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
	Logprobs     any     `json:"logprobs"`
	StopReason   any     `json:"stop_reason,omitempty"` // as ChatChoice's
}

// ChatChunk is a chat.completion.chunk.
type ChatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"` // "chat.completion.chunk"
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *Usage            `json:"usage"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID          string `json:"id"`
	Object      string `json:"object"` // "model"
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
	// Root is what the model was loaded from (a LoRA adapter's path);
	// Parent is a LoRA adapter's base model, null for a base model.
	Root   string  `json:"root,omitempty"`
	Parent *string `json:"parent"`
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}

// Finish reasons.
const (
	FinishStop   = "stop"
	FinishLength = "length"
)

// CheckRoles returns an error naming the first message whose role is not
// one a chat template knows (system, developer, user, assistant, tool).
func CheckRoles(msgs []Message) error {
	for i, m := range msgs {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return fmt.Errorf("messages[%d].role %q: want system, developer, user, assistant or tool", i, m.Role)
		}
		if m.NoContent && m.Role != "assistant" {
			return fmt.Errorf("messages[%d].content: a %s message needs content, a string or an array of content parts; got null", i, m.Role)
		}
	}
	return nil
}

// StringPtr returns a pointer to s, for optional fields such as finish_reason.
func StringPtr(s string) *string { return &s }
