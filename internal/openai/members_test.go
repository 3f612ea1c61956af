package openai

import (
	"fmt"
	"strings"
	"testing"
)

// manyKeys is a body of n distinct keys followed by extra.
func manyKeys(n int, extra string) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	return b.String() + extra + "}"
}

// memberCases are bodies CheckMembers accepts (ok) or refuses with param.
var memberCases = []struct {
	name, body string
	param      string // "" with ok: accepted
	ok         bool
}{
	{"plain", `{"model":"m","prompt":"x","max_tokens":3}`, "", true},
	{"nested keys may repeat", `{"a":{"x":1},"b":{"x":2,"X":3}}`, "", true},
	{"not json is the decoder's", `{"model":`, "", true},
	{"owned field", `{"kv_transfer_params":{}}`, "kv_transfer_params", false},
	{"owned field in another case", `{"KV_Transfer_Params":null}`, "kv_transfer_params", false},
	{"owned field escaped", `{"kv\u005ftransfer_params":1}`, "kv_transfer_params", false},
	{"same key twice", `{"model":"a","model":"b"}`, "model", false},
	{"key in two cases", `{"stream":false,"Stream":true}`, "stream", false},
	{"many keys", manyKeys(100, `"z":0`), "", true},
	{"a repeat past the short list", manyKeys(100, `"K7":0`), "k7", false},
	{"a repeat within the short list", manyKeys(10, `"K7":0`), "k7", false},
	{"invalid utf-8", "{\"prompt\":\"\xff\"}", "", false},
	{"truncated utf-8 in a key", "{\"p\xe2\x82\":1}", "", false},
	{"chat with a repeat and bad utf-8", "{\"model\":\"m\",\"user\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}],\"USER\":\"b\"}", "", false},
	{"chat with a repeat", `{"model":"m","user":"a","messages":[{"role":"user","content":"x"}],"USER":"b"}`, "user", false},
	{"chat with the owned field", `{"model":"m","messages":[],"Kv_Transfer_Params":{"a":1}}`, "kv_transfer_params", false},
	{"chat with many keys", manyKeys(40, `"messages":[],"K35":1`), "k35", false},
}

func TestCheckMembers(t *testing.T) {
	for _, tc := range memberCases {
		t.Run(tc.name, func(t *testing.T) {
			fe := CheckMembers([]byte(tc.body), "kv_transfer_params")
			if (fe == nil) != tc.ok {
				t.Fatalf("CheckMembers(%q) = %v, want ok %v", tc.body, fe, tc.ok)
			}
			if fe != nil && fe.Param != tc.param {
				t.Errorf("param = %q, want %q", fe.Param, tc.param)
			}
		})
	}
}
