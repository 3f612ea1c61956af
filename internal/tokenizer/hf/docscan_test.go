package hf

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzMembers: members never panics, and on any JSON object encoding/json
// accepts it finds the same members with the same values.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a": 1, "b": "x\"}y", "c": [1, {"d": null}], "e": {"f": "\\"}}`,
		`{"model": {"vocab": {"a": 0}, "merges": ["a b"]}, "added_tokens": []}`,
		`{"a": true} `, `{"a":`, `{"a": "\u00e9"}`, `[1]`, `{"a": 1}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := members(data)
		var want map[string]json.RawMessage
		if json.Unmarshal(data, &want) != nil || want == nil || !utf8.Valid(data) {
			// Not an object (members may accept or refuse, but not
			// panic), or invalid UTF-8, which encoding/json replaces in
			// keys and members keeps.
			return
		}
		if err != nil {
			t.Fatalf("members refused valid %q: %v", data, err)
		}
		last := map[string][]byte{}
		for _, m := range got {
			last[m.key] = m.val // the last of a repeated key wins, as in encoding/json
		}
		if len(last) != len(want) {
			t.Fatalf("%q: %d members, encoding/json %d", data, len(last), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(bytes.TrimSpace(last[k]), bytes.TrimSpace(v)) {
				t.Errorf("%q: member %q = %q, encoding/json %q", data, k, last[k], v)
			}
		}
	})
}
