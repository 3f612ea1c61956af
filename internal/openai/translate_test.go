package openai

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the translators' output")

// chatStream is a chat completion stream with text, then two tool calls
// whose arguments arrive in pieces, then usage: what a chat engine sends
// a translated request.
var chatStream = []string{
	`{"choices":[{"index":0,"delta":{"role":"assistant"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"Checking "}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"the yard."}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"track","arguments":""}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"car\":"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"7}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"switch","arguments":"{}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	`{"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":12,"total_tokens":52,"prompt_tokens_details":{"cached_tokens":32}}}`,
	`[DONE]`,
}

// relay writes a chat stream to tr as the frontend's relay does: headers,
// then each event's lines, in pieces that split lines.
func relay(tr *Translator, events []string) {
	tr.Header().Set("Content-Type", "text/event-stream")
	tr.WriteHeader(http.StatusOK)
	var all bytes.Buffer
	for _, e := range events {
		all.WriteString("data: " + e + "\n\n")
	}
	b := all.Bytes()
	for len(b) > 0 {
		n := min(len(b), 37) // not a line boundary
		_, _ = tr.Write(b[:n])
		tr.Flush()
		b = b[n:]
	}
	tr.Finish()
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden transcript:\n got: %s\nwant: %s", name, got, want)
	}
}

// eventTypes lists a transcript's event names, checking that each data
// payload's type is its event's name.
func eventTypes(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for _, ev := range strings.Split(strings.TrimSpace(string(b)), "\n\n") {
		name, data, ok := strings.Cut(ev, "\ndata: ")
		name = strings.TrimPrefix(name, "event: ")
		var d struct{ Type string }
		if !ok || json.Unmarshal([]byte(data), &d) != nil || d.Type != name {
			t.Fatalf("event %q: data is not an object of type %s", ev, name)
		}
		out = append(out, name)
	}
	return out
}

// TestGoldenAnthropicStream pins the Messages API transcript of a chat
// stream, and its event order: message_start, ping, each content block
// started, its deltas and stopped, message_delta with usage, message_stop.
func TestGoldenAnthropicStream(t *testing.T) {
	req, fe := DecodeAnthropic([]byte(`{"model":"m","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"go"}]}`))
	if fe != nil {
		t.Fatal(fe)
	}
	rec := httptest.NewRecorder()
	relay(NewAnthropicTranslator(rec, req, "msg_1", 40), chatStream)
	checkGolden(t, "anthropic_stream.golden", rec.Body.Bytes())
	want := "message_start ping content_block_start content_block_delta content_block_delta content_block_stop " +
		"content_block_start content_block_delta content_block_delta content_block_stop " +
		"content_block_start content_block_delta content_block_stop message_delta message_stop"
	if got := strings.Join(eventTypes(t, rec.Body.Bytes()), " "); got != want {
		t.Errorf("events\n%s\nwant\n%s", got, want)
	}
	if !strings.Contains(rec.Body.String(), `"stop_reason":"tool_use"`) || !strings.Contains(rec.Body.String(), `"input_tokens":8,"output_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":32`) {
		t.Errorf("message_delta lacks stop_reason tool_use or the usage split (8 uncached + 32 cached):\n%s", rec.Body.String())
	}
}

// TestGoldenResponsesStream pins the Responses API transcript of a chat
// stream: response.created and .in_progress, the message item with its
// text part, each function call with its arguments, response.completed
// with usage; sequence numbers count from 0.
func TestGoldenResponsesStream(t *testing.T) {
	req, fe := DecodeResponses([]byte(`{"model":"m","stream":true,"input":"go","tools":[{"type":"function","name":"track","parameters":{"type":"object"}},{"type":"function","name":"switch"}]}`))
	if fe != nil {
		t.Fatal(fe)
	}
	rec := httptest.NewRecorder()
	tr := NewResponsesTranslator(rec, req, "resp_1")
	tr.conv.(*responsesConv).obj.CreatedAt = 1700000000
	var done *ResponseObject
	tr.OnResponse = func(o *ResponseObject) { done = o }
	relay(tr, chatStream)
	checkGolden(t, "responses_stream.golden", rec.Body.Bytes())
	want := "response.created response.in_progress response.output_item.added response.content_part.added " +
		"response.output_text.delta response.output_text.delta response.output_text.done response.content_part.done response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.function_call_arguments.done response.output_item.done " +
		"response.completed"
	if got := strings.Join(eventTypes(t, rec.Body.Bytes()), " "); got != want {
		t.Errorf("events\n%s\nwant\n%s", got, want)
	}
	if done == nil || done.Usage == nil || done.Usage.InputTokensDetails.CachedTokens != 32 || len(done.Output) != 3 || done.OutputText != "Checking the yard." {
		t.Errorf("completed response %+v: want 3 output items, the text and 32 cached tokens", done)
	}
	turn := OutputTurn(done)
	if turn.Content != "Checking the yard." || len(turn.ToolCalls) != 2 || turn.ToolCalls[0].Function.Arguments != `{"car":7}` {
		t.Errorf("stored turn %+v", turn)
	}
}

// TestTranslatorErrors: an error event in the middle of a stream, and an
// error answer, come out in the API's own shape.
func TestTranslatorErrors(t *testing.T) {
	areq, _ := DecodeAnthropic([]byte(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}]}`))
	rreq, _ := DecodeResponses([]byte(`{"model":"m","input":"x"}`))
	broken := []string{`{"choices":[{"index":0,"delta":{"content":"a"}}]}`, `{"error":{"message":"worker w1 died","type":"server_error","param":null,"code":502}}`, `[DONE]`}

	rec := httptest.NewRecorder()
	relay(NewAnthropicTranslator(rec, areq, "msg_1", 3), broken)
	if got := eventTypes(t, rec.Body.Bytes()); got[len(got)-1] != "error" || !strings.Contains(rec.Body.String(), `"type":"api_error","message":"worker w1 died"`) {
		t.Errorf("anthropic stream error:\n%s", rec.Body.String())
	}
	rec = httptest.NewRecorder()
	relay(NewResponsesTranslator(rec, rreq, "resp_1"), broken)
	if got := eventTypes(t, rec.Body.Bytes()); got[len(got)-1] != "error" || !strings.Contains(rec.Body.String(), `"message":"worker w1 died"`) {
		t.Errorf("responses stream error:\n%s", rec.Body.String())
	}

	rec = httptest.NewRecorder()
	tr := NewAnthropicTranslator(rec, areq, "msg_1", 3)
	WriteError(tr, http.StatusTooManyRequests, TypeRateLimit, "", "slow down")
	tr.Finish()
	if rec.Code != http.StatusTooManyRequests || strings.TrimSpace(rec.Body.String()) != `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}` {
		t.Errorf("anthropic error answer %d %s", rec.Code, rec.Body.String())
	}
}

// TestStreamEnd: the last event of each native stream is recognised,
// with or without a space after the colon, and nothing else is.
func TestStreamEnd(t *testing.T) {
	for p, want := range map[string]bool{
		`{"type":"message_stop"}`:  true,
		`{"type": "message_stop"}`: true,
		`{"response":{"output":[{"type":"message"}]},"sequence_number":9,"type":"response.completed"}`: true,
		`{"type":"response.incomplete","response":{}}`:                                                 true,
		`{"type":"content_block_delta","delta":{"text":"\"type\":\"message_stop\""}}`:                  false,
		`{"type":"response.output_text.delta"}`:                                                        false,
		`{"choices":[]}`:                                                                               false,
	} {
		if got := StreamEnd([]byte(p)); got != want {
			t.Errorf("StreamEnd(%s) = %v, want %v", p, got, want)
		}
	}
}

// FuzzDecodeAnthropic: any body either decodes into a request that
// renders and translates, or fails with a message for the client; never
// a panic.
func FuzzDecodeAnthropic(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","max_tokens":4,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","max_tokens":4,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]}]}],"tools":[{"name":"n","input_schema":{}}],"tool_choice":{"type":"any"}}`,
		`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":null}]}`,
		`{"messages":[{"content":[{"type":"image"}]}]}`, `[]`, `{`, `{"system":7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, fe := DecodeAnthropic(body)
		if fe != nil {
			if fe.Msg == "" {
				t.Fatalf("error without a message for %q", body)
			}
			return
		}
		if _, err := json.Marshal(r.Chat()); err != nil {
			t.Fatalf("chat translation of %q does not encode: %v", body, err)
		}
	})
}

// FuzzDecodeResponses is FuzzDecodeAnthropic for the Responses API.
func FuzzDecodeResponses(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","input":"x","instructions":"i","text":{"format":{"type":"json_schema","name":"s","schema":{}}}}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"}]},{"type":"function_call","call_id":"c","name":"n","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"r"}],"tools":[{"type":"function","name":"n"}],"tool_choice":{"type":"function","name":"n"}}`,
		`{"model":"m","input":[{"role":"user","content":null}]}`,
		`{"input":[{"type":"item_reference"}]}`, `[]`, `{`, `{"input":7}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, fe := DecodeResponses(body)
		if fe != nil {
			if fe.Msg == "" {
				t.Fatalf("error without a message for %q", body)
			}
			return
		}
		if _, err := json.Marshal(r.Chat(nil)); err != nil {
			t.Fatalf("chat translation of %q does not encode: %v", body, err)
		}
	})
}
