package openai

import (
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
}

func TestDecodeRequest(t *testing.T) {
	for _, c := range decodeCases {
		t.Run(c.name, func(t *testing.T) {
			sameDecode(t, []byte(c.body))
			var req CompletionRequest
			if got := decodeFast([]byte(c.body), &req); got != c.fast {
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
	if decodeFast([]byte(deep), &req) {
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
	f.Fuzz(func(t *testing.T, body []byte) { sameDecode(t, body) })
}
