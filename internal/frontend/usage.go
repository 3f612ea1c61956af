package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// includeUsage is the stream_options that asks an engine for a final usage
// chunk.
var includeUsage = json.RawMessage(`{"include_usage":true}`)

// withStreamUsage returns body asking the worker to end a stream with a
// usage chunk, which carries what the engine served from cache (the index
// agreement check and the cache-hit metrics need it), and whether the
// client did not ask for that chunk itself: the relay then strips it, so
// the client gets the stream it asked for. A non-streaming body, or one
// that asks for usage already, is returned as it is.
func withStreamUsage(body []byte, req *openai.CompletionRequest) ([]byte, bool, error) {
	if !req.Stream || req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		return body, false, nil
	}
	if req.StreamOptions == nil && !bytes.Contains(body, []byte(`"stream_options"`)) {
		// The common case, without decoding the body again: the field goes
		// first in the object, so no key of the client's repeats.
		i := bytes.IndexByte(body, '{')
		if i < 0 {
			return nil, false, fmt.Errorf("frontend: ask for stream usage: body is not a JSON object")
		}
		out := make([]byte, 0, len(body)+40)
		out = append(out, body[:i+1]...)
		out = append(out, `"stream_options":{"include_usage":true},`...)
		return append(out, body[i+1:]...), true, nil
	}
	// stream_options is there (null, or without include_usage): keep the
	// client's other options.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, false, fmt.Errorf("frontend: ask for stream usage: %w", err)
	}
	opts := map[string]json.RawMessage{}
	if raw := fields["stream_options"]; len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, false, fmt.Errorf("frontend: ask for stream usage: stream_options: %w", err)
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	if _, ok := opts["continuous_usage_stats"]; ok {
		// vLLM honours it only with include_usage: the client, which
		// did not ask for usage, would have had none in its chunks.
		opts["continuous_usage_stats"] = json.RawMessage("false")
	}
	so, err := json.Marshal(opts)
	if err != nil {
		return nil, false, fmt.Errorf("frontend: ask for stream usage: %w", err)
	}
	out, err := rewriteBody(body, map[string]json.RawMessage{"stream_options": so})
	return out, err == nil, err
}

var emptyChoices = []byte(`"choices":[]`)

// usageChunk reports whether an SSE line is the final usage chunk of a
// stream (no choices, a usage object), and returns its data payload.
func usageChunk(line []byte) ([]byte, bool) {
	if !bytes.HasPrefix(line, dataPrefix) {
		return nil, false
	}
	p := bytes.TrimSpace(line[len(dataPrefix):])
	return p, bytes.Contains(p, usageKey) && bytes.Contains(p, emptyChoices)
}
