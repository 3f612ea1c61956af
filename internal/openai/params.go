package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
)

// Stop is the request's stop field: null, one string, or a list of
// strings. Anything else fails to decode with a *json.UnmarshalTypeError
// naming the field.
type Stop []string

// UnmarshalJSON implements json.Unmarshaler.
func (s *Stop) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = Stop{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*s = list
		return nil
	}
	return &json.UnmarshalTypeError{Value: string(truncate(b, 32)), Field: "stop", Type: stopType}
}

// stopType names what stop must be in type errors.
var stopType = reflect.TypeFor[Stop]()

// FieldError is a request field whose value the API does not accept.
type FieldError struct {
	Param string // the field, as the error envelope's param
	Msg   string
}

func (e *FieldError) Error() string { return e.Msg }

func fieldErr(param, format string, a ...any) *FieldError {
	return &FieldError{Param: param, Msg: fmt.Sprintf(format, a...)}
}

// CheckParams checks the optional generation parameters against the ranges
// the OpenAI API and vLLM accept, for a chat (chat) or completions request.
// Types were checked on decode; fields the project does not itself use are
// checked here so that a wrong value fails at the frontend with the field
// named, whatever engine serves it. It returns nil when all are valid.
func (r *CompletionRequest) CheckParams(chat bool) *FieldError {
	if len(r.Logprobs) > 0 && !isNull(r.Logprobs) {
		if chat {
			var b bool
			if json.Unmarshal(r.Logprobs, &b) != nil {
				return fieldErr("logprobs", "logprobs must be true or false in a chat request, got %s", truncate(r.Logprobs, 32))
			}
		} else {
			var n int
			if json.Unmarshal(r.Logprobs, &n) != nil || n < 0 || n > 20 {
				return fieldErr("logprobs", "logprobs must be an integer in 0..20 in a completions request, got %s", truncate(r.Logprobs, 32))
			}
		}
	}
	if r.TopLogprobs != nil && (*r.TopLogprobs < 0 || *r.TopLogprobs > 20) {
		return fieldErr("top_logprobs", "top_logprobs must be in 0..20, got %d", *r.TopLogprobs)
	}
	if r.N != nil && (*r.N < 1 || *r.N > 128) {
		return fieldErr("n", "n must be in 1..128, got %d", *r.N)
	}
	if r.BestOf != nil && (*r.BestOf < 1 || (r.N != nil && *r.BestOf < *r.N)) {
		return fieldErr("best_of", "best_of must be at least 1 and at least n, got %d", *r.BestOf)
	}
	for _, p := range []struct {
		name string
		v    *float64
	}{{"presence_penalty", r.PresencePenalty}, {"frequency_penalty", r.FrequencyPenalty}} {
		if p.v != nil && (*p.v < -2 || *p.v > 2) {
			return fieldErr(p.name, "%s must be in [-2, 2], got %v", p.name, *p.v)
		}
	}
	if r.RepetitionPenalty != nil && *r.RepetitionPenalty <= 0 {
		return fieldErr("repetition_penalty", "repetition_penalty must be positive, got %v", *r.RepetitionPenalty)
	}
	if r.TopK != nil && *r.TopK < -1 {
		return fieldErr("top_k", "top_k must be -1 (off) or at least 0, got %d", *r.TopK)
	}
	if r.MinP != nil && (*r.MinP < 0 || *r.MinP > 1) {
		return fieldErr("min_p", "min_p must be in [0, 1], got %v", *r.MinP)
	}
	for k, v := range r.LogitBias {
		if v < -100 || v > 100 {
			return fieldErr("logit_bias", "logit_bias[%q] must be in [-100, 100], got %v", k, v)
		}
	}
	if r.MinTokens != nil {
		mt := r.MaxTokens
		if mt == nil {
			mt = r.MaxCompletion
		}
		if *r.MinTokens < 0 || (mt != nil && *r.MinTokens > *mt) {
			return fieldErr("min_tokens", "min_tokens must be between 0 and max_tokens, got %d", *r.MinTokens)
		}
	}
	for i, s := range r.Stop {
		if s == "" {
			return fieldErr("stop", "stop[%d] is empty; every stop sequence needs at least one character", i)
		}
	}
	if len(r.ResponseFormat) > 0 && !isNull(r.ResponseFormat) {
		var rf struct {
			Type *string `json:"type"`
		}
		if json.Unmarshal(r.ResponseFormat, &rf) != nil || rf.Type == nil {
			return fieldErr("response_format", `response_format must be an object with a "type", e.g. {"type":"json_object"}`)
		}
	}
	if len(r.Tools) > 0 && !isNull(r.Tools) {
		var tools []map[string]json.RawMessage
		if json.Unmarshal(r.Tools, &tools) != nil {
			return fieldErr("tools", "tools must be an array of tool objects")
		}
	}
	if len(r.ToolChoice) > 0 && !isNull(r.ToolChoice) {
		var s string
		var o map[string]json.RawMessage
		if json.Unmarshal(r.ToolChoice, &s) != nil && json.Unmarshal(r.ToolChoice, &o) != nil {
			return fieldErr("tool_choice", `tool_choice must be "none", "auto", "required" or an object naming a function`)
		}
	}
	return nil
}

func isNull(b json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }

// TypeError describes a field of the wrong type for a client: the field,
// what it got and what it wants, e.g. `stop: got number, want a string or
// an array of strings`. It returns the field (as the error's param) and the
// message.
func TypeError(te *json.UnmarshalTypeError) (field, msg string) {
	field = te.Field
	// A type that names itself gets its name twice: "prompt.prompt".
	if a, b, ok := strings.Cut(field, "."); ok && a == b {
		field = a
	}
	want := "another type"
	if te.Type != nil {
		switch te.Type {
		case stopType:
			want = "a string or an array of strings"
		default:
			switch te.Type.Kind() {
			case reflect.String:
				want = "a string"
			case reflect.Bool:
				want = "true or false"
			case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint32, reflect.Uint64:
				want = "an integer"
			case reflect.Float64, reflect.Float32:
				want = "a number"
			case reflect.Slice:
				want = "an array"
			case reflect.Map, reflect.Struct:
				want = "an object"
			}
		}
	}
	if n, ok := strings.CutPrefix(te.Value, "number "); ok && want == "an integer" && isIntegerLiteral(n) {
		// A whole number too large for the field is out of range, not
		// of the wrong type.
		return field, fmt.Sprintf("field %q is out of range: %s does not fit in a 64-bit integer (at most %d)", field, n, math.MaxInt64)
	}
	return field, fmt.Sprintf("field %q has the wrong type: got %s, want %s", field, te.Value, want)
}

// isIntegerLiteral reports whether a JSON number is written as a whole
// number (an optional minus and digits only).
func isIntegerLiteral(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
