package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// AnthropicRequest is the body of POST /v1/messages, Anthropic's Messages
// API, with the fields Switchyard reads; the rest reach an engine that
// serves the endpoint itself untouched, and are dropped when the request
// is translated into a chat completion.
type AnthropicRequest struct {
	Model         string             `json:"model"`
	MaxTokens     *int               `json:"max_tokens"`
	System        AnthropicSystem    `json:"system"`
	Messages      []AnthropicMessage `json:"messages"`
	StopSequences []string           `json:"stop_sequences"`
	Temperature   *float64           `json:"temperature"`
	TopP          *float64           `json:"top_p"`
	TopK          *int               `json:"top_k"`
	Tools         json.RawMessage    `json:"tools"`
	ToolChoice    json.RawMessage    `json:"tool_choice"`
	Metadata      json.RawMessage    `json:"metadata"`
	Stream        bool               `json:"stream"`
}

// AnthropicSystem is the system prompt: a string, or text blocks joined
// with "\n".
type AnthropicSystem string

// UnmarshalJSON implements json.Unmarshaler.
func (s *AnthropicSystem) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		*s = AnthropicSystem(str)
		return nil
	}
	var blocks []AnthropicBlock
	if err := json.Unmarshal(b, &blocks); err != nil {
		return &FieldError{Param: "system", Msg: "system must be a string or an array of text blocks"}
	}
	parts := make([]string, 0, len(blocks))
	for i, bl := range blocks {
		if bl.Type != "text" {
			return &FieldError{Param: "system", Msg: fmt.Sprintf("system[%d]: block type %q; system blocks must be text", i, bl.Type)}
		}
		parts = append(parts, bl.Text)
	}
	*s = AnthropicSystem(textOf(parts))
	return nil
}

// AnthropicMessage is one turn of messages; string content decodes as one
// text block.
type AnthropicMessage struct {
	Role    string           `json:"role"`
	Content []AnthropicBlock `json:"content"`
}

// UnmarshalJSON implements json.Unmarshaler.
func (m *AnthropicMessage) UnmarshalJSON(b []byte) error {
	var raw struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	m.Role, m.Content = raw.Role, nil
	c := bytes.TrimSpace(raw.Content)
	switch {
	case len(c) == 0 || bytes.Equal(c, []byte("null")):
		return &FieldError{Param: "messages", Msg: "a message needs content: a string or an array of content blocks"}
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return err
		}
		m.Content = []AnthropicBlock{{Type: "text", Text: s}}
		return nil
	}
	if err := json.Unmarshal(c, &m.Content); err != nil {
		return &FieldError{Param: "messages", Msg: "message content must be a string or an array of content blocks"}
	}
	return nil
}

// AnthropicBlock is a content block of a request: text, tool_use (in an
// assistant turn) or tool_result (in a user turn). Other types decode, and
// are refused by Validate.
type AnthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // tool_result: a string or text blocks
	IsError   bool            `json:"is_error"`
}

// DecodeAnthropic decodes and validates a Messages API request body. The
// error names the field at fault; it is the client's (a 400).
func DecodeAnthropic(body []byte) (*AnthropicRequest, *FieldError) {
	return decodeValid[AnthropicRequest](body)
}

// decodeValid decodes body into a T and validates it: the one shape of the
// Messages and Responses decoders.
func decodeValid[T any, P interface {
	*T
	validate() *FieldError
}](body []byte) (*T, *FieldError) {
	var r T
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, decodeErr(err)
	}
	if fe := P(&r).validate(); fe != nil {
		return nil, fe
	}
	return &r, nil
}

func (r *AnthropicRequest) validate() *FieldError {
	switch {
	case r.Model == "":
		return fieldErr("model", "model is required")
	case r.MaxTokens == nil:
		return fieldErr("max_tokens", "max_tokens is required")
	case *r.MaxTokens < 1:
		return fieldErr("max_tokens", "max_tokens must be at least 1, got %d", *r.MaxTokens)
	case len(r.Messages) == 0:
		return fieldErr("messages", "messages is required and must not be empty")
	case r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 1):
		return fieldErr("temperature", "temperature must be in [0, 1], got %v", *r.Temperature)
	case r.TopP != nil && (*r.TopP <= 0 || *r.TopP > 1):
		return fieldErr("top_p", "top_p must be in (0, 1], got %v", *r.TopP)
	case r.TopK != nil && *r.TopK < 0:
		return fieldErr("top_k", "top_k must be at least 0, got %d", *r.TopK)
	}
	for i, s := range r.StopSequences {
		if s == "" {
			return fieldErr("stop_sequences", "stop_sequences[%d] is empty", i)
		}
	}
	for i, m := range r.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fieldErr("messages", "messages[%d].role %q: want user or assistant (the system prompt goes in the top-level system field)", i, m.Role)
		}
		for j, b := range m.Content {
			where := fmt.Sprintf("messages[%d].content[%d]", i, j)
			switch b.Type {
			case "text", "thinking", "redacted_thinking":
			case "tool_use":
				if m.Role != "assistant" || b.ID == "" || b.Name == "" || !isJSONObject(b.Input) {
					return fieldErr("messages", "%s: a tool_use block belongs to an assistant turn and needs id, name and an input object", where)
				}
			case "tool_result":
				if m.Role != "user" || b.ToolUseID == "" {
					return fieldErr("messages", "%s: a tool_result block belongs to a user turn and needs tool_use_id", where)
				}
				if _, fe := toolResultText(b.Content); fe != nil {
					return fieldErr("messages", "%s: %s", where, fe.Msg)
				}
			case "image", "document":
				return fieldErr("messages", "%s: %s blocks are not supported: this deployment serves text models; send text blocks", where, b.Type)
			default:
				return fieldErr("messages", "%s: content block type %q is not supported; send text, tool_use or tool_result blocks", where, b.Type)
			}
		}
	}
	if len(r.Tools) > 0 && !isNull(r.Tools) {
		var tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		if json.Unmarshal(r.Tools, &tools) != nil {
			return fieldErr("tools", "tools must be an array of tool objects")
		}
		for i, t := range tools {
			if t.Name == "" || !isJSONObject(t.InputSchema) {
				return fieldErr("tools", "tools[%d] needs a name and an input_schema object", i)
			}
		}
	}
	if len(r.ToolChoice) > 0 && !isNull(r.ToolChoice) {
		if _, fe := anthropicToolChoice(r.ToolChoice); fe != nil {
			return fe
		}
	}
	return nil
}

// toolResultText is a tool_result's content as text: a string, or text
// blocks joined with "\n".
func toolResultText(c json.RawMessage) (string, *FieldError) {
	c = bytes.TrimSpace(c)
	if len(c) == 0 || isNull(c) {
		return "", nil
	}
	var s string
	if json.Unmarshal(c, &s) == nil {
		return s, nil
	}
	var blocks []AnthropicBlock
	if json.Unmarshal(c, &blocks) != nil {
		return "", fieldErr("messages", "tool_result content must be a string or an array of text blocks")
	}
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		if b.Type != "text" {
			return "", fieldErr("messages", "tool_result content block type %q is not supported; send text", b.Type)
		}
		parts = append(parts, b.Text)
	}
	return textOf(parts), nil
}

// anthropicToolChoice translates tool_choice into the chat API's.
func anthropicToolChoice(c json.RawMessage) (json.RawMessage, *FieldError) {
	var tc struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(c, &tc) != nil {
		return nil, fieldErr("tool_choice", `tool_choice must be an object: {"type": "auto"|"any"|"tool"|"none"}`)
	}
	switch tc.Type {
	case "auto":
		return json.RawMessage(`"auto"`), nil
	case "any":
		return json.RawMessage(`"required"`), nil
	case "none":
		return json.RawMessage(`"none"`), nil
	case "tool":
		if tc.Name == "" {
			return nil, fieldErr("tool_choice", `tool_choice of type "tool" needs a name`)
		}
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}})
		return b, nil
	}
	return nil, fieldErr("tool_choice", `tool_choice.type %q: want "auto", "any", "tool" or "none"`, tc.Type)
}

// Turns renders the request as chat turns: the system prompt first, tool
// results as tool turns (ahead of the user's text in the same turn), tool
// uses as the assistant's tool calls. Text blocks of one turn are joined
// with "\n", as a chat's text parts are. r must be valid.
func (r *AnthropicRequest) Turns() []ChatTurn {
	turns := make([]ChatTurn, 0, len(r.Messages)+1)
	if r.System != "" {
		turns = append(turns, ChatTurn{Role: "system", Content: string(r.System)})
	}
	for _, m := range r.Messages {
		var text []string
		t := ChatTurn{Role: m.Role}
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				text = append(text, b.Text)
			case "tool_use":
				t.ToolCalls = append(t.ToolCalls, ToolCall{ID: b.ID, Type: "function",
					Function: FunctionCall{Name: b.Name, Arguments: string(compactJSON(b.Input))}})
			case "tool_result":
				s, _ := toolResultText(b.Content)
				turns = append(turns, ChatTurn{Role: "tool", Content: s, ToolCallID: b.ToolUseID})
			}
		}
		if m.Role == "user" && len(text) == 0 {
			continue // only tool results
		}
		t.Content = textOf(text)
		turns = append(turns, t)
	}
	return turns
}

// Chat is the request as a chat completion. A stream asks for usage, which
// the Messages API reports at its end.
func (r *AnthropicRequest) Chat() *ChatBody {
	b := &ChatBody{Model: r.Model, Messages: r.Turns(), MaxTokens: r.MaxTokens, Temperature: r.Temperature,
		TopP: r.TopP, TopK: r.TopK, Stop: r.StopSequences, Stream: r.Stream}
	if r.Stream {
		b.StreamOptions = &StreamOptions{IncludeUsage: true}
	}
	if len(r.Tools) > 0 && !isNull(r.Tools) {
		var tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		_ = json.Unmarshal(r.Tools, &tools) // validated
		out := make([]map[string]any, len(tools))
		for i, t := range tools {
			fn := map[string]any{"name": t.Name, "parameters": t.InputSchema}
			if t.Description != "" {
				fn["description"] = t.Description
			}
			out[i] = map[string]any{"type": "function", "function": fn}
		}
		b.Tools, _ = json.Marshal(out)
	}
	if len(r.ToolChoice) > 0 && !isNull(r.ToolChoice) {
		b.ToolChoice, _ = anthropicToolChoice(r.ToolChoice)
	}
	return b
}

func compactJSON(b json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

// AnthropicUsage is a message's usage. InputTokens are the prompt tokens
// not read from the prefix cache, as Anthropic counts them: the whole
// prompt is InputTokens + CacheReadInputTokens + CacheCreationInputTokens.
type AnthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// AnthropicUsageOf converts a chat usage: Switchyard's prefix cache is
// not written by request, so nothing counts as cache creation.
func AnthropicUsageOf(u *Usage) AnthropicUsage {
	if u == nil {
		return AnthropicUsage{}
	}
	cached := 0
	if u.PromptTokensDetails != nil {
		cached = min(u.PromptTokensDetails.CachedTokens, u.PromptTokens)
	}
	return AnthropicUsage{InputTokens: u.PromptTokens - cached, OutputTokens: u.CompletionTokens, CacheReadInputTokens: cached}
}

// Usage converts back to a chat usage, for accounting.
func (u AnthropicUsage) Usage() Usage {
	p := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
	return Usage{PromptTokens: p, CompletionTokens: u.OutputTokens, TotalTokens: p + u.OutputTokens,
		PromptTokensDetails: &PromptTokensDetails{CachedTokens: u.CacheReadInputTokens}}
}

// AnthropicResponse is a message object.
type AnthropicResponse struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"` // "assistant"
	Model        string         `json:"model"`
	Content      []any          `json:"content"` // AnthropicText and AnthropicToolUse blocks
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        AnthropicUsage `json:"usage"`
}

// AnthropicTextBlock is a text block of an answer.
type AnthropicTextBlock struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

// AnthropicToolUse is a tool_use block of an answer.
type AnthropicToolUse struct {
	Type  string          `json:"type"` // "tool_use"
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// Stop reasons of the Messages API.
const (
	StopEndTurn      = "end_turn"
	StopMaxTokens    = "max_tokens"
	StopSequenceHit  = "stop_sequence"
	StopToolUse      = "tool_use"
	anthropicMsgType = "message"
)

// anthropicStop maps a chat finish to a stop reason and, when a stop
// sequence ended the text, which one.
func anthropicStop(finish *string, stopReason any, seqs []string) (string, *string) {
	if finish == nil {
		return StopEndTurn, nil
	}
	switch *finish {
	case FinishLength:
		return StopMaxTokens, nil
	case "tool_calls":
		return StopToolUse, nil
	}
	if s, ok := stopReason.(string); ok {
		for _, q := range seqs {
			if q == s {
				return StopSequenceHit, &s
			}
		}
	}
	return StopEndTurn, nil
}

// toolInput is a tool call's arguments as a tool_use input: the object
// they encode, or {} when a model wrote something else.
func toolInput(args string) json.RawMessage {
	b := json.RawMessage(strings.TrimSpace(args))
	if !isJSONObject(b) {
		return json.RawMessage("{}")
	}
	return compactJSON(b)
}

// AnthropicFromChat builds the message answering r from a chat answer.
func AnthropicFromChat(r *AnthropicRequest, id string, a *ChatAnswer) AnthropicResponse {
	out := AnthropicResponse{ID: id, Type: anthropicMsgType, Role: "assistant", Model: r.Model, Content: []any{}, Usage: AnthropicUsageOf(a.Usage)}
	var finish *string
	var stopReason any
	if len(a.Choices) > 0 {
		c := &a.Choices[0]
		finish, stopReason = c.FinishReason, c.StopReason
		if c.Message.Content != nil && *c.Message.Content != "" {
			out.Content = append(out.Content, AnthropicTextBlock{Type: "text", Text: *c.Message.Content})
		}
		for _, tc := range c.Message.ToolCalls {
			out.Content = append(out.Content, AnthropicToolUse{Type: "tool_use", ID: toolUseID(tc.ID), Name: tc.Function.Name, Input: toolInput(tc.Function.Arguments)})
		}
	}
	reason, seq := anthropicStop(finish, stopReason, r.StopSequences)
	out.StopReason, out.StopSequence = &reason, seq
	return out
}

// toolUseID keeps a chat tool call's id, which the client sends back in
// its tool_result.
func toolUseID(id string) string {
	if id == "" {
		return "toolu_0"
	}
	return id
}

// Anthropic error types, by HTTP status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// AnthropicError is the Messages API's error body:
// {"type": "error", "error": {"type": ..., "message": ...}}.
type AnthropicError struct {
	Type  string `json:"type"` // "error"
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// NewAnthropicError builds the error body for an HTTP status.
func NewAnthropicError(status int, msg string) AnthropicError {
	var e AnthropicError
	e.Type = "error"
	e.Error.Type = anthropicErrorType(status)
	e.Error.Message = msg
	return e
}

// WriteAnthropicError writes a Messages API error with the given status.
func WriteAnthropicError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(NewAnthropicError(status, msg))
}

// DecodeCountTokens decodes the body of POST /v1/messages/count_tokens: a
// Messages request, max_tokens optional.
func DecodeCountTokens(body []byte) (*AnthropicRequest, *FieldError) {
	var r AnthropicRequest
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, decodeErr(err)
	}
	if r.MaxTokens == nil {
		one := 1
		r.MaxTokens = &one
	}
	if fe := r.validate(); fe != nil {
		return nil, fe
	}
	return &r, nil
}
