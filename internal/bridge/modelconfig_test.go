package bridge

import (
	"os"
	"path/filepath"
	"testing"
)

func TestKVBytesPerToken(t *testing.T) {
	cases := []struct {
		name, config, kvDtype string
		want                  int
	}{
		// Qwen3-0.6B's config.json: the ARCHITECTURE preset's 114,688.
		{"qwen3-0.6b", `{"num_hidden_layers":28,"num_attention_heads":16,"num_key_value_heads":8,"head_dim":128,"hidden_size":1024,"torch_dtype":"bfloat16"}`, "", 114688},
		// Llama 3.1 8B: no head_dim, from hidden_size / heads.
		{"llama-3.1-8b", `{"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":4096,"torch_dtype":"bfloat16"}`, "", 131072},
		{"fp8 kv cache", `{"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":4096,"torch_dtype":"bfloat16"}`, "fp8_e4m3", 65536},
		{"no gqa", `{"num_hidden_layers":2,"num_attention_heads":4,"hidden_size":256,"torch_dtype":"float32"}`, "", 2 * 2 * 4 * 64 * 4},
	}
	dir := t.TempDir()
	for _, c := range cases {
		p := filepath.Join(dir, c.name+".json")
		os.WriteFile(p, []byte(c.config), 0o644)
		got, err := KVBytesPerToken(p, c.kvDtype)
		if err != nil || got != c.want {
			t.Errorf("%s: %d, %v; want %d", c.name, got, err, c.want)
		}
	}
	for name, bad := range map[string]string{
		"mla":      `{"num_hidden_layers":61,"num_attention_heads":128,"kv_lora_rank":512,"hidden_size":7168}`,
		"no layer": `{"num_attention_heads":4,"hidden_size":256}`,
		"dtype":    `{"num_hidden_layers":2,"num_attention_heads":4,"hidden_size":256,"torch_dtype":"complex64"}`,
		"json":     `{`,
	} {
		p := filepath.Join(dir, name+".json")
		os.WriteFile(p, []byte(bad), 0o644)
		if _, err := KVBytesPerToken(p, ""); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := KVBytesPerToken(filepath.Join(dir, "missing.json"), ""); err == nil {
		t.Error("missing file: no error")
	}
}
