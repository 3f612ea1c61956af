package openai

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ChatTurn is one chat message as the frontend and the simulated engine
// send it on when they translate another API into a chat completion: the
// text, and the tool calls and tool results that Message leaves out.
type ChatTurn struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is one entry of a chat message's tool_calls.
type ToolCall struct {
	// Index is set only in stream deltas, where it says which call an
	// arguments fragment continues.
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall is a tool call's function: its name and its arguments, a
// JSON document in a string.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Messages are the turns as the chat template sees them: role and text.
// A chat request carrying the same transcript decodes to the same
// messages (its tool calls are not rendered either), so both tokenize,
// and hash, alike.
func Messages(turns []ChatTurn) []Message {
	out := make([]Message, len(turns))
	for i, t := range turns {
		out[i] = Message{Role: t.Role, Content: t.Content}
	}
	return out
}

// ChatBody is the /v1/chat/completions request another API's request
// translates into.
type ChatBody struct {
	Model          string          `json:"model"`
	Messages       []ChatTurn      `json:"messages"`
	MaxTokens      *int            `json:"max_tokens,omitempty"`
	Temperature    *float64        `json:"temperature,omitempty"`
	TopP           *float64        `json:"top_p,omitempty"`
	TopK           *int            `json:"top_k,omitempty"`
	Stop           []string        `json:"stop,omitempty"`
	Tools          json.RawMessage `json:"tools,omitempty"`
	ToolChoice     json.RawMessage `json:"tool_choice,omitempty"`
	ResponseFormat json.RawMessage `json:"response_format,omitempty"`
	Stream         bool            `json:"stream,omitempty"`
	StreamOptions  *StreamOptions  `json:"stream_options,omitempty"`
}

// Completion is the request a ChatBody makes: what routing and the
// simulated engine read of it.
func (b *ChatBody) Completion() CompletionRequest {
	return CompletionRequest{
		Model: b.Model, Messages: Messages(b.Messages), MaxTokens: b.MaxTokens, Temperature: b.Temperature,
		TopP: b.TopP, TopK: b.TopK, Stop: Stop(b.Stop), Tools: b.Tools, ToolChoice: b.ToolChoice,
		ResponseFormat: b.ResponseFormat, Stream: b.Stream, StreamOptions: b.StreamOptions,
	}
}

// ChatAnswer is the part of a chat.completion the translations read.
type ChatAnswer struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content   *string    `json:"content"`
			ToolCalls []ToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason *string `json:"finish_reason"`
		// StopReason is vLLM's: the stop string that ended the text, or
		// a token id, or null.
		StopReason any `json:"stop_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
}

// ChatStreamChunk is the part of a chat.completion.chunk the translations
// read.
type ChatStreamChunk struct {
	Choices []struct {
		Delta struct {
			Content   *string    `json:"content"`
			ToolCalls []ToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
		StopReason   any     `json:"stop_reason"`
	} `json:"choices"`
	Usage *Usage `json:"usage"`
}

// errBody is the error of a decode that is not a type error.
var errBody = errors.New("openai: request body is not valid JSON")

// decodeErr turns a json.Unmarshal error into a FieldError for a client.
func decodeErr(err error) *FieldError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field, msg := TypeError(te)
		return &FieldError{Param: field, Msg: msg}
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe
	}
	return &FieldError{Msg: fmt.Sprintf("%v: %v", errBody, err)}
}

// textOf joins text blocks as a chat's text parts are joined, with "\n".
func textOf(parts []string) string {
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	n := len(parts) - 1
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			b = append(b, '\n')
		}
		b = append(b, p...)
	}
	return string(b)
}

// isJSONObject reports whether b is a JSON object.
func isJSONObject(b json.RawMessage) bool {
	var o map[string]json.RawMessage
	return json.Unmarshal(b, &o) == nil && o != nil
}
