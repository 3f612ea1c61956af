package openai

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// discard is a ResponseWriter that keeps nothing, so the benchmark times
// the translation alone.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }

// benchStream is a chat stream of n one-word text chunks, then the finish
// and usage chunks, as the relay writes it: one line per Write.
func benchStream(n int) [][]byte {
	lines := make([][]byte, 0, n+4)
	for i := range n {
		lines = append(lines, []byte(fmt.Sprintf(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" word%d"},"finish_reason":null}]}`+"\n\n", i)))
	}
	lines = append(lines, []byte(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`+"\n\n"),
		[]byte(`data: {"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":256,"total_tokens":1256,"prompt_tokens_details":{"cached_tokens":992}}}`+"\n\n"),
		[]byte("data: [DONE]\n\n"))
	return lines
}

// BenchmarkTranslateStream times translating one 256-token chat stream
// into each API's events; tokens/s is the rate one core sustains.
func BenchmarkTranslateStream(b *testing.B) {
	lines := benchStream(256)
	areq, _ := DecodeAnthropic([]byte(`{"model":"m","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"x"}]}`))
	rreq, _ := DecodeResponses([]byte(`{"model":"m","max_output_tokens":256,"stream":true,"input":"x"}`))
	for _, api := range []string{"messages", "responses"} {
		b.Run(api, func(b *testing.B) {
			w := &discard{h: http.Header{}}
			w.h.Set("Content-Type", "text/event-stream")
			// The output checked once before timing: whole, and with usage.
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", "text/event-stream")
			check := NewAnthropicTranslator(rec, areq, "msg_1", 1000)
			last := "message_stop"
			if api == "responses" {
				check, last = NewResponsesTranslator(rec, rreq, "resp_1"), "response.incomplete"
			}
			check.WriteHeader(http.StatusOK)
			for _, l := range lines {
				_, _ = check.Write(l)
			}
			if out := rec.Body.String(); !strings.HasSuffix(strings.TrimSpace(out), `"type":"`+last+`"}`) || !strings.Contains(out, "992") {
				b.Fatalf("translation does not end with %s and usage:\n%s", last, out[max(0, len(out)-400):])
			}
			var events int
			b.ReportAllocs()
			for range b.N {
				var tr *Translator
				if api == "messages" {
					tr = NewAnthropicTranslator(w, areq, "msg_1", 1000)
				} else {
					tr = NewResponsesTranslator(w, rreq, "resp_1")
				}
				tr.WriteHeader(http.StatusOK)
				for _, l := range lines {
					_, _ = tr.Write(l)
				}
				events++
			}
			b.ReportMetric(float64(256*events)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
