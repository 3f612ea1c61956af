package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Translator is an http.ResponseWriter that takes a chat completion's
// answer, whole or streamed, and writes it to the client in another API:
// Anthropic's Messages or OpenAI's Responses. With Native set (before the
// first write) the answer is already in that API and passes through; only
// errors in the OpenAI envelope, which Switchyard's own relay writes, are
// rewritten into the API's shape.
//
// A non-streaming answer is buffered and written by Finish; a stream is
// converted event by event as it is written, and flushed when the writer
// is. It is not safe for concurrent use.
type Translator struct {
	// Native: the body is the API's own (an engine serving the endpoint
	// itself); set before the first write.
	Native bool
	// OnID, if set, is called with the response id once it is known; a
	// native answer's id is read from its body.
	OnID func(id string)
	// OnResponse, if set, is called with a Responses answer translated
	// from chat, once complete (the simulated engine stores it).
	OnResponse func(*ResponseObject)

	w       http.ResponseWriter
	conv    converter
	status  int
	stream  bool
	begun   bool
	buf     []byte // a non-streaming body, or a partial SSE line
	out     []byte
	errSeen bool // an error event was written: the stream is over
	usage   *Usage
}

// converter is one API's side of a Translator.
type converter interface {
	// answer converts a whole chat answer into the API's body.
	answer(a *ChatAnswer) any
	// start, chunk and done convert a stream.
	start(out []byte) []byte
	chunk(c *ChatStreamChunk, out []byte) []byte
	done(out []byte) []byte
	// streamError is an error event; errorBody an error answer.
	streamError(status int, msg string, out []byte) []byte
	errorBody(status int, msg string) any
	// nativeID reads the response id from a native payload (a body or a
	// stream event); "" when it has none.
	nativeID(p []byte) string
	// nativeUsage reads usage from a native payload.
	nativeUsage(p []byte) *Usage
}

// NewAnthropicTranslator answers r with message id, on w. inputTokens is
// the prompt length reported by message_start before the engine's own
// count arrives with message_delta.
func NewAnthropicTranslator(w http.ResponseWriter, r *AnthropicRequest, id string, inputTokens int) *Translator {
	return &Translator{w: w, conv: &anthropicConv{req: r, id: id, input: inputTokens, block: -1}}
}

// NewResponsesTranslator answers r with response id, on w.
func NewResponsesTranslator(w http.ResponseWriter, r *ResponsesRequest, id string) *Translator {
	t := &Translator{w: w}
	t.conv = &responsesConv{t: t, req: r, obj: NewResponseObject(r, id, time.Now().Unix())}
	return t
}

// Header implements http.ResponseWriter.
func (t *Translator) Header() http.Header { return t.w.Header() }

// Unwrap lets http.ResponseController reach the connection (write
// deadlines).
func (t *Translator) Unwrap() http.ResponseWriter { return t.w }

// Usage is the chat usage of the answer, once seen (a native answer's
// converted back); nil before.
func (t *Translator) Usage() *Usage { return t.usage }

// WriteHeader implements http.ResponseWriter. A streaming answer's headers
// go out at once; a whole one's wait for Finish.
func (t *Translator) WriteHeader(code int) {
	if t.status != 0 {
		return
	}
	t.status = code
	t.stream = code == http.StatusOK && strings.HasPrefix(t.w.Header().Get("Content-Type"), "text/event-stream")
	if !t.stream {
		return
	}
	t.begun = true
	t.w.WriteHeader(code)
	if !t.Native {
		t.out = t.conv.start(t.out[:0])
		t.emit()
	}
}

// Write implements http.ResponseWriter.
func (t *Translator) Write(p []byte) (int, error) {
	if t.status == 0 {
		t.WriteHeader(http.StatusOK)
	}
	if !t.stream {
		t.buf = append(t.buf, p...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	t.out = t.out[:0]
	rest := t.buf
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		t.line(rest[:i+1])
		rest = rest[i+1:]
	}
	t.buf = append(t.buf[:0], rest...)
	if err := t.emit(); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (t *Translator) emit() error {
	if len(t.out) == 0 {
		return nil
	}
	_, err := t.w.Write(t.out)
	t.out = t.out[:0]
	return err
}

// Flush implements http.Flusher.
func (t *Translator) Flush() {
	if f, ok := t.w.(http.Flusher); ok {
		f.Flush()
	}
}

// line handles one SSE line (with its newline).
func (t *Translator) line(l []byte) {
	payload, isData := bytes.CutPrefix(bytes.TrimRight(l, "\r\n"), dataPrefixBytes)
	payload = bytes.TrimSpace(payload)
	if isData && bytes.HasPrefix(payload, []byte(`{"error"`)) {
		// Switchyard's own (or a chat engine's) error event.
		var e ErrorResponse
		_ = json.Unmarshal(payload, &e)
		status := e.Error.Code
		if status == 0 {
			status = http.StatusBadGateway
		}
		t.out = t.conv.streamError(status, e.Error.Message, t.out)
		t.errSeen = true
		return
	}
	if t.errSeen {
		return // the [DONE] after an error event
	}
	if t.Native {
		if isData {
			t.observe(payload)
		}
		t.out = append(t.out, l...)
		return
	}
	if !isData {
		return
	}
	if bytes.Equal(payload, doneMarker) {
		t.out = t.conv.done(t.out)
		return
	}
	var c ChatStreamChunk
	if json.Unmarshal(payload, &c) != nil {
		return
	}
	if c.Usage != nil {
		t.usage = c.Usage
	}
	t.out = t.conv.chunk(&c, t.out)
}

var dataPrefixBytes = []byte("data:")

// observe reads a native payload's id and usage.
func (t *Translator) observe(p []byte) {
	if t.OnID != nil {
		if id := t.conv.nativeID(p); id != "" {
			t.OnID(id)
			t.OnID = nil
		}
	}
	if u := t.conv.nativeUsage(p); u != nil {
		t.usage = u
	}
}

// Finish writes a non-streaming answer; a stream needs nothing more. It
// returns whether anything was written at all.
func (t *Translator) Finish() bool {
	if t.stream || t.status == 0 {
		return t.status != 0
	}
	h := t.w.Header()
	body := t.buf
	switch {
	case t.Native:
		if t.status == http.StatusOK {
			t.observe(body)
		} else if e, ok := openAIError(body); ok {
			body = t.errJSON(t.status, e)
		}
	case t.status == http.StatusOK:
		var a ChatAnswer
		if err := json.Unmarshal(body, &a); err != nil {
			t.status = http.StatusBadGateway
			body = t.errJSON(t.status, fmt.Sprintf("openai: the engine's chat answer does not decode: %v", err))
			break
		}
		t.usage = a.Usage
		body, _ = json.Marshal(t.conv.answer(&a))
	default:
		msg := string(bytes.TrimSpace(body))
		if e, ok := openAIError(body); ok {
			msg = e
		}
		body = t.errJSON(t.status, msg)
	}
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	t.begun = true
	t.w.WriteHeader(t.status)
	_, _ = t.w.Write(body)
	return true
}

func (t *Translator) errJSON(status int, msg string) []byte {
	b, _ := json.Marshal(t.conv.errorBody(status, msg))
	return b
}

// openAIError reads the message of an OpenAI error envelope.
func openAIError(b []byte) (string, bool) {
	var e ErrorResponse
	if json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
		return "", false
	}
	return e.Error.Message, true
}

// appendEvent appends one named SSE event.
func appendEvent(out []byte, name string, v any) []byte {
	b, _ := json.Marshal(v)
	out = append(out, "event: "...)
	out = append(out, name...)
	out = append(out, "\ndata: "...)
	out = append(out, b...)
	return append(out, '\n', '\n')
}

// anthropicConv converts chat into the Messages API.
type anthropicConv struct {
	req   *AnthropicRequest
	id    string
	input int

	block      int // index of the open content block; -1: none
	next       int // index of the next block
	toolBlocks map[int]int
	finish     *string
	stopReason any
	usage      *Usage
}

func (c *anthropicConv) answer(a *ChatAnswer) any { return AnthropicFromChat(c.req, c.id, a) }

func (c *anthropicConv) start(out []byte) []byte {
	msg := AnthropicResponse{ID: c.id, Type: anthropicMsgType, Role: "assistant", Model: c.req.Model, Content: []any{},
		Usage: AnthropicUsage{InputTokens: c.input}}
	out = appendEvent(out, "message_start", map[string]any{"type": "message_start", "message": msg})
	return appendEvent(out, "ping", map[string]string{"type": "ping"})
}

func (c *anthropicConv) closeBlock(out []byte) []byte {
	if c.block < 0 {
		return out
	}
	out = appendEvent(out, "content_block_stop", map[string]any{"type": "content_block_stop", "index": c.block})
	c.block = -1
	return out
}

func (c *anthropicConv) chunk(ch *ChatStreamChunk, out []byte) []byte {
	if ch.Usage != nil {
		c.usage = ch.Usage
	}
	if len(ch.Choices) == 0 {
		return out
	}
	ch0 := &ch.Choices[0]
	if d := ch0.Delta.Content; d != nil && *d != "" {
		if c.block < 0 || c.isTool(c.block) {
			out = c.closeBlock(out)
			c.block, c.next = c.next, c.next+1
			out = appendEvent(out, "content_block_start", map[string]any{"type": "content_block_start", "index": c.block,
				"content_block": AnthropicTextBlock{Type: "text", Text: ""}})
		}
		out = appendEvent(out, "content_block_delta", map[string]any{"type": "content_block_delta", "index": c.block,
			"delta": map[string]string{"type": "text_delta", "text": *d}})
	}
	for _, tc := range ch0.Delta.ToolCalls {
		k := 0
		if tc.Index != nil {
			k = *tc.Index
		}
		b, ok := c.toolBlocks[k]
		if !ok {
			if c.toolBlocks == nil {
				c.toolBlocks = map[int]int{}
			}
			out = c.closeBlock(out)
			b, c.next = c.next, c.next+1
			c.toolBlocks[k], c.block = b, b
			out = appendEvent(out, "content_block_start", map[string]any{"type": "content_block_start", "index": b,
				"content_block": AnthropicToolUse{Type: "tool_use", ID: toolUseID(tc.ID), Name: tc.Function.Name, Input: json.RawMessage("{}")}})
		}
		if tc.Function.Arguments != "" && b == c.block {
			out = appendEvent(out, "content_block_delta", map[string]any{"type": "content_block_delta", "index": b,
				"delta": map[string]string{"type": "input_json_delta", "partial_json": tc.Function.Arguments}})
		}
	}
	if ch0.FinishReason != nil {
		c.finish, c.stopReason = ch0.FinishReason, ch0.StopReason
		out = c.closeBlock(out)
	}
	return out
}

func (c *anthropicConv) isTool(block int) bool {
	for _, b := range c.toolBlocks {
		if b == block {
			return true
		}
	}
	return false
}

func (c *anthropicConv) done(out []byte) []byte {
	out = c.closeBlock(out)
	reason, seq := anthropicStop(c.finish, c.stopReason, c.req.StopSequences)
	u := AnthropicUsageOf(c.usage)
	if c.usage == nil {
		u.InputTokens = c.input
	}
	out = appendEvent(out, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq}, "usage": u})
	return appendEvent(out, "message_stop", map[string]string{"type": "message_stop"})
}

func (c *anthropicConv) streamError(status int, msg string, out []byte) []byte {
	return appendEvent(out, "error", NewAnthropicError(status, msg))
}

func (c *anthropicConv) errorBody(status int, msg string) any { return NewAnthropicError(status, msg) }

func (c *anthropicConv) nativeID(p []byte) string {
	var m struct {
		ID      string `json:"id"`
		Message struct {
			ID string `json:"id"`
		} `json:"message"`
	}
	if json.Unmarshal(p, &m) != nil {
		return ""
	}
	if m.ID != "" {
		return m.ID
	}
	return m.Message.ID
}

func (c *anthropicConv) nativeUsage(p []byte) *Usage {
	if !bytes.Contains(p, []byte(`"usage"`)) {
		return nil
	}
	var m struct {
		Type  string          `json:"type"`
		Usage *AnthropicUsage `json:"usage"`
	}
	// message_start carries the input counts and message_delta the
	// final ones; a whole message has one usage.
	if json.Unmarshal(p, &m) != nil || m.Usage == nil || m.Type == "message_start" {
		return nil
	}
	u := m.Usage.Usage()
	return &u
}

// responsesConv converts chat into the Responses API.
type responsesConv struct {
	t   *Translator
	req *ResponsesRequest
	obj ResponseObject
	seq int

	msgIndex int // output index of the open message item; -1: none
	msgOpen  bool
	text     strings.Builder
	calls    map[int]*openCall
	openCall *openCall
	finish   *string
	usage    *Usage
}

type openCall struct {
	index int
	item  ResponseFunctionCall
	args  strings.Builder
}

func (c *responsesConv) answer(a *ChatAnswer) any {
	o := ResponseFromChat(c.req, c.obj.ID, c.obj.CreatedAt, a)
	if c.t.OnID != nil {
		c.t.OnID(o.ID)
	}
	if c.t.OnResponse != nil {
		c.t.OnResponse(&o)
	}
	return o
}

func (c *responsesConv) event(out []byte, typ string, fields map[string]any) []byte {
	fields["type"] = typ
	fields["sequence_number"] = c.seq
	c.seq++
	return appendEvent(out, typ, fields)
}

func (c *responsesConv) start(out []byte) []byte {
	if c.t.OnID != nil {
		c.t.OnID(c.obj.ID)
	}
	out = c.event(out, "response.created", map[string]any{"response": c.obj})
	return c.event(out, "response.in_progress", map[string]any{"response": c.obj})
}

func (c *responsesConv) msgID() string { return "msg_" + c.obj.ID }

func (c *responsesConv) closeItem(out []byte) []byte {
	switch {
	case c.msgOpen:
		c.msgOpen = false
		text := c.text.String()
		part := ResponseOutputText{Type: "output_text", Text: text, Annotations: []any{}, Logprobs: []any{}}
		item := ResponseMessage{Type: "message", ID: c.msgID(), Status: "completed", Role: "assistant", Content: []ResponseOutputText{part}}
		out = c.event(out, "response.output_text.done", map[string]any{"item_id": c.msgID(), "output_index": c.msgIndex, "content_index": 0, "text": text, "logprobs": []any{}})
		out = c.event(out, "response.content_part.done", map[string]any{"item_id": c.msgID(), "output_index": c.msgIndex, "content_index": 0, "part": part})
		out = c.event(out, "response.output_item.done", map[string]any{"output_index": c.msgIndex, "item": item})
		c.obj.Output = append(c.obj.Output, item)
		c.obj.OutputText = text
	case c.openCall != nil:
		oc := c.openCall
		c.openCall = nil
		oc.item.Arguments, oc.item.Status = oc.args.String(), "completed"
		out = c.event(out, "response.function_call_arguments.done", map[string]any{"item_id": oc.item.ID, "output_index": oc.index, "name": oc.item.Name, "arguments": oc.item.Arguments})
		out = c.event(out, "response.output_item.done", map[string]any{"output_index": oc.index, "item": oc.item})
		c.obj.Output = append(c.obj.Output, oc.item)
	}
	return out
}

func (c *responsesConv) chunk(ch *ChatStreamChunk, out []byte) []byte {
	if ch.Usage != nil {
		c.usage = ch.Usage
	}
	if len(ch.Choices) == 0 {
		return out
	}
	ch0 := &ch.Choices[0]
	if d := ch0.Delta.Content; d != nil && *d != "" {
		if !c.msgOpen {
			out = c.closeItem(out)
			c.msgOpen, c.msgIndex = true, len(c.obj.Output)
			c.text.Reset()
			item := ResponseMessage{Type: "message", ID: c.msgID(), Status: "in_progress", Role: "assistant", Content: []ResponseOutputText{}}
			out = c.event(out, "response.output_item.added", map[string]any{"output_index": c.msgIndex, "item": item})
			out = c.event(out, "response.content_part.added", map[string]any{"item_id": c.msgID(), "output_index": c.msgIndex, "content_index": 0,
				"part": ResponseOutputText{Type: "output_text", Text: "", Annotations: []any{}, Logprobs: []any{}}})
		}
		c.text.WriteString(*d)
		out = c.event(out, "response.output_text.delta", map[string]any{"item_id": c.msgID(), "output_index": c.msgIndex, "content_index": 0, "delta": *d, "logprobs": []any{}})
	}
	for _, tc := range ch0.Delta.ToolCalls {
		k := 0
		if tc.Index != nil {
			k = *tc.Index
		}
		oc, ok := c.calls[k]
		if !ok {
			if c.calls == nil {
				c.calls = map[int]*openCall{}
			}
			out = c.closeItem(out)
			n := len(c.obj.Output)
			oc = &openCall{index: n, item: ResponseFunctionCall{Type: "function_call", ID: fmt.Sprintf("fc_%s_%d", c.obj.ID, k),
				CallID: callID(tc.ID, c.obj.ID, k), Name: tc.Function.Name, Status: "in_progress"}}
			c.calls[k], c.openCall = oc, oc
			out = c.event(out, "response.output_item.added", map[string]any{"output_index": n, "item": oc.item})
		}
		if tc.Function.Arguments != "" && oc == c.openCall {
			oc.args.WriteString(tc.Function.Arguments)
			out = c.event(out, "response.function_call_arguments.delta", map[string]any{"item_id": oc.item.ID, "output_index": oc.index, "delta": tc.Function.Arguments})
		}
	}
	if ch0.FinishReason != nil {
		c.finish = ch0.FinishReason
		out = c.closeItem(out)
	}
	return out
}

func (c *responsesConv) done(out []byte) []byte {
	out = c.closeItem(out)
	c.obj.finish(c.finish)
	c.obj.Usage = ResponsesUsageOf(c.usage)
	if c.t.OnResponse != nil {
		c.t.OnResponse(&c.obj)
	}
	typ := "response.completed"
	if c.obj.Status == "incomplete" {
		typ = "response.incomplete"
	}
	return c.event(out, typ, map[string]any{"response": c.obj})
}

func (c *responsesConv) streamError(status int, msg string, out []byte) []byte {
	code := "server_error"
	if status >= 400 && status < 500 {
		code = "invalid_request_error"
	}
	return c.event(out, "error", map[string]any{"code": code, "message": msg, "param": nil})
}

func (c *responsesConv) errorBody(status int, msg string) any {
	typ := TypeServer
	switch {
	case status == http.StatusNotFound:
		typ = TypeNotFound
	case status == http.StatusTooManyRequests:
		typ = TypeRateLimit
	case status == http.StatusServiceUnavailable:
		typ = TypeUnavailable
	case status >= 400 && status < 500:
		typ = TypeInvalidRequest
	}
	return NewError(status, typ, "", msg)
}

func (c *responsesConv) nativeID(p []byte) string {
	var m struct {
		Type     string `json:"type"`
		ID       string `json:"id"`
		Response struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	if json.Unmarshal(p, &m) != nil {
		return ""
	}
	if m.Type == "" || m.Type == "response" {
		return m.ID
	}
	return m.Response.ID
}

func (c *responsesConv) nativeUsage(p []byte) *Usage {
	if !bytes.Contains(p, []byte(`"usage"`)) {
		return nil
	}
	var m struct {
		Usage    *ResponsesUsage `json:"usage"`
		Response struct {
			Usage *ResponsesUsage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(p, &m) != nil {
		return nil
	}
	r := m.Usage
	if r == nil {
		r = m.Response.Usage
	}
	if r == nil {
		return nil
	}
	u := r.Usage()
	return &u
}

// StreamEnd reports whether a native stream payload is the API's last
// event: message_stop, or response.completed, .incomplete or .failed. The
// type may be anywhere in the object (a "type":"..." pair cannot occur
// inside a JSON string, where quotes are escaped).
func StreamEnd(p []byte) bool {
	for rest := p; ; {
		i := bytes.Index(rest, []byte(`"type":`))
		if i < 0 {
			return false
		}
		rest = bytes.TrimLeft(rest[i+len(`"type":`):], " ")
		for _, t := range [...]string{`"message_stop"`, `"response.completed"`, `"response.incomplete"`, `"response.failed"`} {
			if bytes.HasPrefix(rest, []byte(t)) {
				return true
			}
		}
	}
}
