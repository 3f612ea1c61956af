package sim

import (
	"encoding/json"
	"testing"
)

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"qwen3-0.6b","prompt":"hi","max_tokens":3}`,
		`{"prompt":[1,2,3],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"messages":[{"role":"user","content":"x"}],"cache_salt":"a","kv_transfer_params":{"do_remote_decode":true}}`,
		`{"prompt":["one"]}`, `{"prompt":{}}`, `{"max_tokens":"x"}`, `{`, `null`, `{"a":1} {"b":2}`,
	} {
		f.Add([]byte(s))
	}
	w, err := NewWorker(Config{KVBlocks: 64})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeRequest(body)
		if err != nil {
			var ae *apiError
			if !asAPIError(err, &ae) || ae.status != 400 {
				t.Fatalf("decode error %v is not a 400 apiError", err)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		for _, chat := range []bool{false, true} {
			g, aerr := w.validate(req, chat)
			if aerr != nil {
				if aerr.status != 400 && aerr.status != 404 {
					t.Fatalf("validate status %d", aerr.status)
				}
				continue
			}
			if len(g.tokens) == 0 || g.maxTokens < 0 {
				t.Fatalf("validated request with %d tokens, max %d", len(g.tokens), g.maxTokens)
			}
		}
	})
}

func asAPIError(err error, target **apiError) bool {
	ae, ok := err.(*apiError)
	*target = ae
	return ok
}
