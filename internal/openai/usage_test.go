package openai

import (
	"encoding/json"
	"testing"
)

// TestUsageOfAgreesWithEncodingJSON checks UsageOf against decoding the
// whole document with encoding/json, which it stands in for.
func TestUsageOfAgreesWithEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		`{"id":"c1","choices":[{"index":0,"delta":{"content":"\"usage\":{\"prompt_tokens\":9}"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":8}}}`,
		`{"usage":null}`,
		`{}`,
		` { "choices" : [ ] , "usage" : { "prompt_tokens" : 4 } } `,
		`{"Usage":{"prompt_tokens":5}}`,
		`{"usage":{"prompt_tokens":1},"USAGE":{"prompt_tokens":2}}`,
		`{"us\u0061ge":{"prompt_tokens":7}}`,
		`{"nested":{"usage":{"prompt_tokens":99}},"x":[1,2,{"usage":3}]}`,
		`{"usage":{"prompt_tokens":3,"extra":{"a":[1]},"prompt_tokens_details":{"cached_tokens":2,"audio_tokens":0}}}`,
		`{"usage":{"prompt_tokens_details":null,"completion_tokens":1}}`,
		`{"usage":{"Prompt_Tokens":6,"prompt_tokens":7}}`,
		`{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":4,"switchyard_kv_tiers":{"gpu_tokens":4}}}}`,
	} {
		var want struct {
			Usage *Usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		got, ok := UsageOf([]byte(doc))
		if !ok {
			t.Errorf("UsageOf(%s) not ok", doc)
			continue
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want.Usage)
		if string(g) != string(w) {
			t.Errorf("UsageOf(%s) = %s, encoding/json says %s", doc, g, w)
		}
	}
	for _, bad := range []string{`{"usage":{"prompt_tokens":"x"}}`, `{"usage":{"prompt_tokens":-1.5}}`, `{"usage":{"prompt_tokens":01}}`, `{"usage":{"prompt_tokens":1.0e1}}`, `{"usage":`, `[1]`, `{"a":1,}`, `not json`} {
		if _, ok := UsageOf([]byte(bad)); ok {
			t.Errorf("UsageOf(%s) ok, want not", bad)
		}
	}
}

func BenchmarkUsageOf(b *testing.B) {
	doc := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"qwen3-0.6b","choices":[],"usage":{"prompt_tokens":1520,"completion_tokens":8,"total_tokens":1528,"prompt_tokens_details":{"cached_tokens":1504}}}`)
	b.Run("UsageOf", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if u, ok := UsageOf(doc); !ok || u.PromptTokens != 1520 {
				b.Fatal(u, ok)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var v struct {
				Usage *Usage `json:"usage"`
			}
			if json.Unmarshal(doc, &v) != nil || v.Usage.PromptTokens != 1520 {
				b.Fatal(v)
			}
		}
	})
}
