package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// forcedTool is the function a request obliges the model to call
// (tool_choice "required", or one function named): the simulated engine
// answers such a request with a call to it whose arguments satisfy its
// parameters schema, so that agent loops can be tested end to end. With
// tool_choice "auto" or "none" it answers with text.
type forcedTool struct {
	name   string
	params map[string]any // the function's parameters schema; nil: none
}

// toolsOf checks tools and tool_choice and returns the forced tool, if
// any.
func toolsOf(req *openai.CompletionRequest) (*forcedTool, *apiError) {
	type fn struct {
		Name       string         `json:"name"`
		Parameters map[string]any `json:"parameters"`
	}
	var tools []struct {
		Type     string `json:"type"`
		Function *fn    `json:"function"`
	}
	if len(req.Tools) > 0 && !bytes.Equal(bytes.TrimSpace(req.Tools), []byte("null")) {
		if json.Unmarshal(req.Tools, &tools) != nil {
			return nil, badRequest("tools", "tools must be an array of function tools")
		}
		for i, t := range tools {
			if t.Type != "function" || t.Function == nil || t.Function.Name == "" {
				return nil, badRequest("tools", "tools[%d] must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i)
			}
		}
	}
	tc := bytes.TrimSpace(req.ToolChoice)
	if len(tc) == 0 || bytes.Equal(tc, []byte("null")) {
		return nil, nil
	}
	var mode string
	if json.Unmarshal(tc, &mode) == nil {
		switch mode {
		case "none", "auto":
			return nil, nil
		case "required":
			if len(tools) == 0 {
				return nil, badRequest("tool_choice", "tool_choice \"required\" needs tools")
			}
			return &forcedTool{name: tools[0].Function.Name, params: tools[0].Function.Parameters}, nil
		}
		return nil, badRequest("tool_choice", "tool_choice %q: want \"none\", \"auto\" or \"required\"", mode)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(tc, &named) != nil || named.Type != "function" || named.Function.Name == "" {
		return nil, badRequest("tool_choice", "tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	for _, t := range tools {
		if t.Function.Name == named.Function.Name {
			return &forcedTool{name: t.Function.Name, params: t.Function.Parameters}, nil
		}
	}
	return nil, badRequest("tool_choice", "tool_choice names function %q, which is not in tools", named.Function.Name)
}

// call is the deterministic call answering request reqID, choice i: its
// arguments are built from the schema, with strings taken from the text
// the engine generated, so that they vary with the prompt as text does.
func (f *forcedTool) call(reqID string, i int, text string) openai.ToolCall {
	words := strings.Fields(text)
	args, _ := json.Marshal(valueFor(f.params, words, 0))
	if f.params == nil {
		args = []byte("{}")
	}
	idx := i
	return openai.ToolCall{Index: &idx, ID: fmt.Sprintf("call_%s_%d", reqID, i), Type: "function",
		Function: openai.FunctionCall{Name: f.name, Arguments: string(args)}}
}

// valueFor is a value valid against schema s (the subset tools use:
// type, properties, required, items, enum, const, minItems), depth
// levels deep.
func valueFor(s map[string]any, words []string, depth int) any {
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	typ, _ := s["type"].(string)
	if ts, ok := s["type"].([]any); ok && len(ts) > 0 {
		typ, _ = ts[0].(string)
	}
	if typ == "" {
		if _, ok := s["properties"]; ok {
			typ = "object"
		}
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := s["properties"].(map[string]any)
		if depth > 8 {
			return out
		}
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		sort.Strings(names) // deterministic
		for j, k := range names {
			ps, _ := props[k].(map[string]any)
			out[k] = valueFor(ps, rotate(words, j), depth+1)
		}
		return out
	case "array":
		n := 1
		if m, ok := s["minItems"].(float64); ok && int(m) > n {
			n = min(int(m), 16)
		}
		items, _ := s["items"].(map[string]any)
		out := make([]any, n)
		for j := range out {
			out[j] = valueFor(items, rotate(words, j), depth+1)
		}
		return out
	case "integer":
		return 1
	case "number":
		return 1.5
	case "boolean":
		return true
	case "null":
		return nil
	}
	if len(words) == 0 {
		return "value"
	}
	return words[0]
}

func rotate(words []string, j int) []string {
	if len(words) == 0 {
		return words
	}
	j %= len(words)
	return append(words[j:len(words):len(words)], words[:j]...)
}

// toolMessage is a chat message carrying tool calls.
type toolMessage struct {
	Role      string            `json:"role"`
	Content   *string           `json:"content"`
	ToolCalls []openai.ToolCall `json:"tool_calls"`
}

// toolChunk is the stream chunk carrying choice i's whole tool call.
func toolChunk(id string, created int64, model string, i int, call openai.ToolCall) any {
	type delta struct {
		ToolCalls []openai.ToolCall `json:"tool_calls"`
	}
	type choice struct {
		Index        int     `json:"index"`
		Delta        delta   `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	}
	return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
		"choices": []choice{{Index: i, Delta: delta{ToolCalls: []openai.ToolCall{call}}}}}
}
