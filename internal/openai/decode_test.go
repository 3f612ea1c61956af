package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// decodeCases are request bodies the fast path takes (fast) or hands to
// encoding/json; every one must decode as json.Unmarshal decodes it.
var decodeCases = []struct {
	name, body string
	fast       bool
}{
	{"chat", `{"model":"m","messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":8}`, true},
	{"escapes", `{"messages":[{"role":"user","content":"a\nb\t\"q\" \\ \/ \b\f\r \u00e9 \ud83d\ude00 \ud83d x \udc00 \u0000"}]}`, true},
	{"raw utf8 and invalid bytes", "{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xc3\xa9 \xff\xfe end \xe2\x82\"}]}", true},
	{"content parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`, true},
	{"null content and extra members", `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}],"name":"n"}], "temperature": -0.5e+1}`, true},
	{"empty messages", `{"messages":[]}`, true},
	{"null messages", `{"messages":null,"model":"m"}`, true},
	{"empty message", `{"messages":[{}]}`, true},
	{"string prompt", ` { "model" : "m" , "prompt" : "once upon\na time" } `, true},
	{"token prompt", `{"prompt":[1,2,3]}`, true},
	{"folded keys", `{"Messages":[{"ROLE":"user","Content":"x"}],"PROMPT":"p"}`, true},
	{"empty object", `{}`, true},
	{"scalars only, no encoding/json", `{"MODEL":"m","Stream":false,"stream_options":{ "include_usage" : false },"max_completion_tokens":-0,"messages":[]}`, true},
	{"scalars beside other members", `{"model":"m\u00e9","max_tokens":9223372036854775807,"temperature":0.5,"user":"u","stream":true}`, true},

	{"stop and logprobs", `{"messages":[{"role":"user","content":"x"}],"stop":["a","b"],"logprobs":true,"logit_bias":{"1":2}}`, true},

	{"image part", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}`, false},
	{"role not a string", `{"messages":[{"role":1,"content":"x"}]}`, false},
	{"content a number", `{"messages":[{"role":"user","content":5}]}`, false},
	{"messages an object", `{"messages":{"role":"user"}}`, false},
	{"duplicate messages", `{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}`, false},
	{"duplicate role", `{"messages":[{"role":"user","role":"system","content":"a"}]}`, false},
	{"escaped key", `{"mess\u0061ges":[{"role":"user","content":"a"}]}`, false},
	{"bad escape", `{"messages":[{"role":"user","content":"a\x"}]}`, false},
	{"control character", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\tb\"}]}", false},
	{"trailing comma", `{"messages":[{"role":"user","content":"a"},]}`, false},
	{"trailing garbage", `{"messages":[]} x`, false},
	{"truncated", `{"messages":[{"role":"user","content":"a`, false},
	{"bad number", `{"messages":[{"role":"user","content":"a","x":01}]}`, false},
	{"type error elsewhere", `{"messages":[{"role":"user","content":"a"}],"max_tokens":"8"}`, false},
	{"duplicate model, folded", `{"model":"a","Model":"b"}`, false},
	{"model null", `{"model":null,"messages":[]}`, false},
	{"max_tokens with a fraction", `{"max_tokens":1.5}`, false},
	{"max_tokens with an exponent", `{"max_tokens":1e2}`, false},
	{"max_tokens overflows", `{"max_tokens":9223372036854775808}`, false},
	{"stream_options with more members", `{"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, false},
	{"stream not a bool", `{"stream":"yes"}`, false},
	{"prompt batch", `{"prompt":["a","b"]}`, false},
	{"not an object", `[1]`, false},
	{"null", `null`, false},
	{"empty", ``, false},
}

// sameDecode fails unless DecodeRequest and json.Unmarshal agree on body.
func sameDecode(t *testing.T, body []byte) {
	t.Helper()
	var got, want CompletionRequest
	gotErr := DecodeRequest(body, &got)
	wantErr := json.Unmarshal(body, &want)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("%q: error %v, json.Unmarshal's %v", body, gotErr, wantErr)
	}
	if gotErr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q:\n got %+v\nwant %+v", body, got, want)
	}
	// DecodeChecked answers as DecodeRequest then CheckMembers.
	var checked CompletionRequest
	fe, err := DecodeChecked(body, &checked, "kv_transfer_params")
	if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
		t.Fatalf("%q: DecodeChecked error %v, json.Unmarshal's %v", body, err, wantErr)
	}
	if err != nil {
		return
	}
	if wantFE := CheckMembers(body, "kv_transfer_params"); !reflect.DeepEqual(fe, wantFE) {
		t.Fatalf("%q: DecodeChecked refused with %v, CheckMembers with %v", body, fe, wantFE)
	}
	if !reflect.DeepEqual(checked, want) {
		t.Fatalf("%q: DecodeChecked:\n got %+v\nwant %+v", body, checked, want)
	}
}

func TestDecodeRequest(t *testing.T) {
	for _, c := range decodeCases {
		t.Run(c.name, func(t *testing.T) {
			sameDecode(t, []byte(c.body))
			var req CompletionRequest
			if got := decodeFast([]byte(c.body), &req, nil); got != c.fast {
				t.Errorf("fast path taken: %v, want %v", got, c.fast)
			}
		})
	}
}

// TestDecodeRequestDeep: nesting past maxDepth goes to encoding/json.
func TestDecodeRequestDeep(t *testing.T) {
	deep := `{"messages":[{"role":"user","content":"x","meta":` + strings.Repeat("[", maxDepth+5) + strings.Repeat("]", maxDepth+5) + `}]}`
	sameDecode(t, []byte(deep))
	var req CompletionRequest
	if decodeFast([]byte(deep), &req, nil) {
		t.Error("fast path took a body nested past maxDepth")
	}
}

// FuzzDecodeRequest: on any input, DecodeRequest answers as json.Unmarshal.
//
//	go test -run '^$' -fuzz FuzzDecodeRequest ./internal/openai
func FuzzDecodeRequest(f *testing.F) {
	for _, c := range decodeCases {
		f.Add([]byte(c.body))
	}
	for _, c := range memberCases {
		f.Add([]byte(c.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { sameDecode(t, body) })
}

// BenchmarkDecodeChecked: a long multi-turn chat decoded and checked in
// one walk (checked) against DecodeRequest then CheckMembers (two-pass).
//
//	go test -run '^$' -bench DecodeChecked -count 6 ./internal/openai
func BenchmarkDecodeChecked(b *testing.B) {
	words := strings.Repeat("The quick brown fox jumps over the lazy dog; then it rests a while.\n", 100)
	msgs := make([]map[string]string, 0, 8)
	for i := range 8 {
		role := []string{"user", "assistant"}[i%2]
		msgs = append(msgs, map[string]string{"role": role, "content": words})
	}
	body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "stream": true,
		"stream_options": map[string]bool{"include_usage": true}, "max_tokens": 64, "temperature": 0.7, "user": "u"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("two-pass", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req CompletionRequest
			if DecodeRequest(body, &req) != nil || CheckMembers(body, "kv_transfer_params") != nil {
				b.Fatal("refused")
			}
		}
	})
	b.Run("checked", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req CompletionRequest
			if fe, err := DecodeChecked(body, &req, "kv_transfer_params"); fe != nil || err != nil {
				b.Fatal("refused")
			}
		}
	})
}

// TestPlainRun: plainRun never skips past a byte that ends a plain run,
// wherever in a word it is and whatever bytes are around it.
func TestPlainRun(t *testing.T) {
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 || c >= 0x80 }
	for c := range 256 {
		for pos := range 24 {
			for _, fill := range []byte{'a', ' ', 0x7f, '!', '#', '[', ']'} {
				b := bytes.Repeat([]byte{fill}, 24)
				b[pos] = byte(c)
				got := plainRun(b, 0)
				want := 24 - 24%8
				if special(byte(c)) {
					want = pos - pos%8
				}
				if got != want {
					t.Fatalf("byte %#x at %d among %q: plainRun = %d, want %d", c, pos, fill, got, want)
				}
			}
		}
	}
}
