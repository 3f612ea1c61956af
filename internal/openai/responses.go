package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ResponsesRequest is the body of POST /v1/responses, OpenAI's Responses
// API, with the fields Switchyard reads; the rest reach an engine that
// serves the endpoint itself untouched, and are dropped when the request
// is translated into a chat completion.
type ResponsesRequest struct {
	Model              string          `json:"model"`
	Instructions       *string         `json:"instructions"`
	Input              ResponsesInput  `json:"input"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	Text               *ResponsesText  `json:"text"`
	Metadata           json.RawMessage `json:"metadata"`
	Store              *bool           `json:"store"`
	Stream             bool            `json:"stream"`
	PreviousResponseID string          `json:"previous_response_id"`
}

// ResponsesText is the request's text options.
type ResponsesText struct {
	Format json.RawMessage `json:"format"`
}

// ResponsesInput is the input: a string (one user message) or a list of
// items. A nil list means input was absent.
type ResponsesInput []ResponsesItem

// UnmarshalJSON implements json.Unmarshaler.
func (in *ResponsesInput) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if isNull(b) {
		*in = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*in = ResponsesInput{{Type: "message", Role: "user", Content: []ResponsesPart{{Type: "input_text", Text: s}}}}
		return nil
	}
	var items []ResponsesItem
	if err := json.Unmarshal(b, &items); err != nil {
		if _, ok := err.(*FieldError); ok {
			return err
		}
		return &FieldError{Param: "input", Msg: "input must be a string or an array of input items"}
	}
	if items == nil {
		items = ResponsesInput{}
	}
	*in = items
	return nil
}

// ResponsesItem is one input item: a message (Type "message" or empty),
// a function_call or a function_call_output. Other types decode and are
// refused by validation, except reasoning, which is dropped.
type ResponsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   []ResponsesPart `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// UnmarshalJSON implements json.Unmarshaler: message content may be a
// string.
func (it *ResponsesItem) UnmarshalJSON(b []byte) error {
	var raw struct {
		Type      string          `json:"type"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Arguments string          `json:"arguments"`
		Output    json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*it = ResponsesItem{Type: raw.Type, Role: raw.Role, CallID: raw.CallID, Name: raw.Name, Arguments: raw.Arguments, Output: raw.Output}
	c := bytes.TrimSpace(raw.Content)
	switch {
	case len(c) == 0:
	case isNull(c):
		if it.Type == "" || it.Type == "message" {
			return &FieldError{Param: "input", Msg: "a message item's content must be a string or an array of content parts, not null"}
		}
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return err
		}
		it.Content = []ResponsesPart{{Type: "input_text", Text: s}}
	default:
		if err := json.Unmarshal(c, &it.Content); err != nil {
			return &FieldError{Param: "input", Msg: "a message item's content must be a string or an array of content parts"}
		}
	}
	return nil
}

// ResponsesPart is a content part of an input message.
type ResponsesPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// DecodeResponses decodes and validates a Responses API request body. The
// error names the field at fault; it is the client's (a 400).
func DecodeResponses(body []byte) (*ResponsesRequest, *FieldError) {
	return decodeValid[ResponsesRequest](body)
}

func (r *ResponsesRequest) validate() *FieldError {
	switch {
	case r.Model == "":
		return fieldErr("model", "model is required")
	case r.Input == nil:
		return fieldErr("input", "input is required: a string or an array of input items")
	case len(r.Input) == 0 && r.PreviousResponseID == "":
		return fieldErr("input", "input must not be empty")
	case r.MaxOutputTokens != nil && *r.MaxOutputTokens < 1:
		return fieldErr("max_output_tokens", "max_output_tokens must be at least 1, got %d", *r.MaxOutputTokens)
	case r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 2):
		return fieldErr("temperature", "temperature must be in [0, 2], got %v", *r.Temperature)
	case r.TopP != nil && (*r.TopP <= 0 || *r.TopP > 1):
		return fieldErr("top_p", "top_p must be in (0, 1], got %v", *r.TopP)
	}
	for i, it := range r.Input {
		where := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "", "message":
			switch it.Role {
			case "user", "assistant", "system", "developer":
			default:
				return fieldErr("input", "%s.role %q: want user, assistant, system or developer", where, it.Role)
			}
			if it.Content == nil {
				return fieldErr("input", "%s: a message needs content", where)
			}
			for j, p := range it.Content {
				switch p.Type {
				case "input_text", "output_text", "text":
				case "input_image", "input_file", "input_audio":
					return fieldErr("input", "%s.content[%d]: %s parts are not supported: this deployment serves text models; send input_text", where, j, p.Type)
				default:
					return fieldErr("input", "%s.content[%d]: content part type %q is not supported; send input_text", where, j, p.Type)
				}
			}
		case "function_call":
			if it.CallID == "" || it.Name == "" {
				return fieldErr("input", "%s: a function_call item needs call_id and name", where)
			}
		case "function_call_output":
			if it.CallID == "" {
				return fieldErr("input", "%s: a function_call_output item needs call_id", where)
			}
			if _, ok := outputText(it.Output); !ok {
				return fieldErr("input", "%s: function_call_output output must be a string or an array of input_text parts", where)
			}
		case "reasoning":
		default:
			return fieldErr("input", "%s: input item type %q is not supported; send message, function_call or function_call_output items", where, it.Type)
		}
	}
	if len(r.Tools) > 0 && !isNull(r.Tools) {
		var tools []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		if json.Unmarshal(r.Tools, &tools) != nil {
			return fieldErr("tools", "tools must be an array of tool objects")
		}
		for i, t := range tools {
			if t.Type != "function" || t.Name == "" {
				return fieldErr("tools", "tools[%d]: only function tools with a name are supported, got type %q", i, t.Type)
			}
		}
	}
	if len(r.ToolChoice) > 0 && !isNull(r.ToolChoice) {
		if _, fe := responsesToolChoice(r.ToolChoice); fe != nil {
			return fe
		}
	}
	if r.Text != nil && len(r.Text.Format) > 0 && !isNull(r.Text.Format) {
		if _, fe := responsesFormat(r.Text.Format); fe != nil {
			return fe
		}
	}
	return nil
}

// outputText is a function_call_output's output as text.
func outputText(o json.RawMessage) (string, bool) {
	o = bytes.TrimSpace(o)
	if len(o) == 0 || isNull(o) {
		return "", true
	}
	var s string
	if json.Unmarshal(o, &s) == nil {
		return s, true
	}
	var parts []ResponsesPart
	if json.Unmarshal(o, &parts) != nil {
		return "", false
	}
	text := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type != "input_text" && p.Type != "output_text" && p.Type != "text" {
			return "", false
		}
		text = append(text, p.Text)
	}
	return textOf(text), true
}

// responsesToolChoice translates tool_choice into the chat API's.
func responsesToolChoice(c json.RawMessage) (json.RawMessage, *FieldError) {
	var s string
	if json.Unmarshal(c, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return c, nil
		}
		return nil, fieldErr("tool_choice", `tool_choice %q: want "auto", "none", "required" or {"type": "function", "name": ...}`, s)
	}
	var o struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(c, &o) != nil || o.Type != "function" || o.Name == "" {
		return nil, fieldErr("tool_choice", `tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}`)
	}
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": o.Name}})
	return b, nil
}

// responsesFormat translates text.format into a chat response_format; nil
// for plain text.
func responsesFormat(f json.RawMessage) (json.RawMessage, *FieldError) {
	var o struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	}
	if json.Unmarshal(f, &o) != nil {
		return nil, fieldErr("text.format", `text.format must be an object with a "type"`)
	}
	switch o.Type {
	case "text":
		return nil, nil
	case "json_object":
		return json.RawMessage(`{"type":"json_object"}`), nil
	case "json_schema":
		if !isJSONObject(o.Schema) {
			return nil, fieldErr("text.format", "a json_schema format needs a schema object")
		}
		js := map[string]any{"name": o.Name, "schema": o.Schema}
		if o.Strict != nil {
			js["strict"] = *o.Strict
		}
		b, _ := json.Marshal(map[string]any{"type": "json_schema", "json_schema": js})
		return b, nil
	}
	return nil, fieldErr("text.format", `text.format.type %q: want "text", "json_object" or "json_schema"`, o.Type)
}

// Turns renders the request as chat turns: instructions as the system
// turn, then the input items; consecutive function calls make one
// assistant turn's tool calls, and each function_call_output a tool turn.
// r must be valid. prev, when not nil, is the stored conversation of
// previous_response_id, placed after the instructions.
func (r *ResponsesRequest) Turns(prev []ChatTurn) []ChatTurn {
	turns := make([]ChatTurn, 0, len(r.Input)+len(prev)+1)
	if r.Instructions != nil && *r.Instructions != "" {
		turns = append(turns, ChatTurn{Role: "system", Content: *r.Instructions})
	}
	turns = append(turns, prev...)
	for _, it := range r.Input {
		switch it.Type {
		case "", "message":
			text := make([]string, len(it.Content))
			for i, p := range it.Content {
				text[i] = p.Text
			}
			turns = append(turns, ChatTurn{Role: it.Role, Content: textOf(text)})
		case "function_call":
			call := ToolCall{ID: it.CallID, Type: "function", Function: FunctionCall{Name: it.Name, Arguments: it.Arguments}}
			if n := len(turns); n > 0 && turns[n-1].Role == "assistant" && len(turns[n-1].ToolCalls) > 0 {
				turns[n-1].ToolCalls = append(turns[n-1].ToolCalls, call)
				continue
			}
			turns = append(turns, ChatTurn{Role: "assistant", ToolCalls: []ToolCall{call}})
		case "function_call_output":
			s, _ := outputText(it.Output)
			turns = append(turns, ChatTurn{Role: "tool", Content: s, ToolCallID: it.CallID})
		}
	}
	return turns
}

// Chat is the request as a chat completion; prev as for Turns. A stream
// asks for usage, which response.completed reports.
func (r *ResponsesRequest) Chat(prev []ChatTurn) *ChatBody {
	b := &ChatBody{Model: r.Model, Messages: r.Turns(prev), MaxTokens: r.MaxOutputTokens, Temperature: r.Temperature,
		TopP: r.TopP, Stream: r.Stream}
	if r.Stream {
		b.StreamOptions = &StreamOptions{IncludeUsage: true}
	}
	if len(r.Tools) > 0 && !isNull(r.Tools) {
		var tools []struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters,omitempty"`
			Strict      *bool           `json:"strict,omitempty"`
		}
		_ = json.Unmarshal(r.Tools, &tools) // validated
		out := make([]map[string]any, len(tools))
		for i, t := range tools {
			fn := map[string]any{"name": t.Name}
			if t.Description != "" {
				fn["description"] = t.Description
			}
			if len(t.Parameters) > 0 && !isNull(t.Parameters) {
				fn["parameters"] = t.Parameters
			}
			out[i] = map[string]any{"type": "function", "function": fn}
		}
		b.Tools, _ = json.Marshal(out)
	}
	if len(r.ToolChoice) > 0 && !isNull(r.ToolChoice) {
		b.ToolChoice, _ = responsesToolChoice(r.ToolChoice)
	}
	if r.Text != nil && len(r.Text.Format) > 0 && !isNull(r.Text.Format) {
		b.ResponseFormat, _ = responsesFormat(r.Text.Format)
	}
	return b
}

// ResponsesUsage is a response's usage.
type ResponsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// ResponsesUsageOf converts a chat usage.
func ResponsesUsageOf(u *Usage) *ResponsesUsage {
	out := &ResponsesUsage{}
	if u == nil {
		return out
	}
	out.InputTokens, out.OutputTokens, out.TotalTokens = u.PromptTokens, u.CompletionTokens, u.PromptTokens+u.CompletionTokens
	if u.PromptTokensDetails != nil {
		out.InputTokensDetails.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
	return out
}

// Usage converts back to a chat usage, for accounting.
func (u *ResponsesUsage) Usage() Usage {
	return Usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.TotalTokens,
		PromptTokensDetails: &PromptTokensDetails{CachedTokens: u.InputTokensDetails.CachedTokens}}
}

// ResponseObject is a response object.
type ResponseObject struct {
	ID                 string          `json:"id"`
	Object             string          `json:"object"` // "response"
	CreatedAt          int64           `json:"created_at"`
	Status             string          `json:"status"` // in_progress, completed, incomplete, failed
	Error              *ResponseError  `json:"error"`
	IncompleteDetails  *Incomplete     `json:"incomplete_details"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Model              string          `json:"model"`
	Output             []any           `json:"output"` // ResponseMessage and ResponseFunctionCall items
	OutputText         string          `json:"output_text"`
	ParallelToolCalls  bool            `json:"parallel_tool_calls"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	Tools              json.RawMessage `json:"tools"`
	Text               json.RawMessage `json:"text"`
	Store              bool            `json:"store"`
	Metadata           json.RawMessage `json:"metadata"`
	Usage              *ResponsesUsage `json:"usage"`
}

// ResponseError is a failed response's error.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Incomplete says why a response is incomplete.
type Incomplete struct {
	Reason string `json:"reason"` // "max_output_tokens"
}

// ResponseMessage is a message output item.
type ResponseMessage struct {
	Type    string               `json:"type"` // "message"
	ID      string               `json:"id"`
	Status  string               `json:"status"`
	Role    string               `json:"role"` // "assistant"
	Content []ResponseOutputText `json:"content"`
}

// ResponseOutputText is an output_text content part.
type ResponseOutputText struct {
	Type        string `json:"type"` // "output_text"
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
}

// ResponseFunctionCall is a function_call output item.
type ResponseFunctionCall struct {
	Type      string `json:"type"` // "function_call"
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

// NewResponseObject is r's response object with no output yet
// (in_progress).
func NewResponseObject(r *ResponsesRequest, id string, created int64) ResponseObject {
	o := ResponseObject{ID: id, Object: "response", CreatedAt: created, Status: "in_progress", Instructions: r.Instructions,
		MaxOutputTokens: r.MaxOutputTokens, Model: r.Model, Output: []any{}, ParallelToolCalls: r.ParallelToolCalls == nil || *r.ParallelToolCalls,
		Temperature: r.Temperature, TopP: r.TopP, ToolChoice: json.RawMessage(`"auto"`), Tools: json.RawMessage("[]"),
		Text: json.RawMessage(`{"format":{"type":"text"}}`), Store: r.Store == nil || *r.Store, Metadata: json.RawMessage("{}")}
	if r.PreviousResponseID != "" {
		p := r.PreviousResponseID
		o.PreviousResponseID = &p
	}
	if len(r.ToolChoice) > 0 && !isNull(r.ToolChoice) {
		o.ToolChoice = r.ToolChoice
	}
	if len(r.Tools) > 0 && !isNull(r.Tools) {
		o.Tools = r.Tools
	}
	if r.Text != nil && len(r.Text.Format) > 0 && !isNull(r.Text.Format) {
		o.Text, _ = json.Marshal(r.Text)
	}
	if len(r.Metadata) > 0 && !isNull(r.Metadata) {
		o.Metadata = r.Metadata
	}
	return o
}

// finish sets the status from a chat finish reason.
func (o *ResponseObject) finish(finish *string) {
	o.Status = "completed"
	if finish != nil && *finish == FinishLength {
		o.Status = "incomplete"
		o.IncompleteDetails = &Incomplete{Reason: "max_output_tokens"}
	}
}

// ResponseFromChat builds the response answering r from a chat answer.
func ResponseFromChat(r *ResponsesRequest, id string, created int64, a *ChatAnswer) ResponseObject {
	o := NewResponseObject(r, id, created)
	var finish *string
	if len(a.Choices) > 0 {
		c := &a.Choices[0]
		finish = c.FinishReason
		if c.Message.Content != nil && (*c.Message.Content != "" || len(c.Message.ToolCalls) == 0) {
			o.Output = append(o.Output, ResponseMessage{Type: "message", ID: "msg_" + id, Status: "completed", Role: "assistant",
				Content: []ResponseOutputText{{Type: "output_text", Text: *c.Message.Content, Annotations: []any{}, Logprobs: []any{}}}})
			o.OutputText = *c.Message.Content
		}
		for i, tc := range c.Message.ToolCalls {
			o.Output = append(o.Output, ResponseFunctionCall{Type: "function_call", ID: fmt.Sprintf("fc_%s_%d", id, i),
				CallID: callID(tc.ID, id, i), Name: tc.Function.Name, Arguments: tc.Function.Arguments, Status: "completed"})
		}
	}
	o.finish(finish)
	o.Usage = ResponsesUsageOf(a.Usage)
	return o
}

func callID(id, resp string, i int) string {
	if id != "" {
		return id
	}
	return fmt.Sprintf("call_%s_%d", resp, i)
}

// OutputTurn is the assistant's turn a response added to the
// conversation, as stored for previous_response_id.
func OutputTurn(o *ResponseObject) ChatTurn {
	t := ChatTurn{Role: "assistant"}
	for _, item := range o.Output {
		switch it := item.(type) {
		case ResponseMessage:
			for _, c := range it.Content {
				t.Content += c.Text
			}
		case ResponseFunctionCall:
			t.ToolCalls = append(t.ToolCalls, ToolCall{ID: it.CallID, Type: "function", Function: FunctionCall{Name: it.Name, Arguments: it.Arguments}})
		}
	}
	return t
}
