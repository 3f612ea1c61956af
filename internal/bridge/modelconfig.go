package bridge

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// KVBytesPerToken derives the KV cache bytes one token occupies from a
// HuggingFace config.json: 2 (K and V) × layers × KV heads × head dim ×
// bytes per element. KV heads fall back to attention heads (no GQA), head
// dim to hidden size ÷ attention heads; the element size comes from
// kvCacheDtype when set (vLLM's --kv-cache-dtype: fp8 → 1), else from
// torch_dtype. Multi-latent attention (DeepSeek's kv_lora_rank) is refused:
// its cache is not per-head.
func KVBytesPerToken(path, kvCacheDtype string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("bridge: --model-config: %w", err)
	}
	var c struct {
		Layers     int    `json:"num_hidden_layers"`
		Heads      int    `json:"num_attention_heads"`
		KVHeads    int    `json:"num_key_value_heads"`
		HeadDim    int    `json:"head_dim"`
		Hidden     int    `json:"hidden_size"`
		Dtype      string `json:"torch_dtype"`
		KVLoraRank int    `json:"kv_lora_rank"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return 0, fmt.Errorf("bridge: --model-config %s: %w", path, err)
	}
	if c.KVLoraRank > 0 {
		return 0, fmt.Errorf("bridge: --model-config %s: multi-latent attention (kv_lora_rank %d) is not per-head; give --kv-bytes-per-token", path, c.KVLoraRank)
	}
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Hidden / c.Heads
	}
	if c.Layers <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 {
		return 0, fmt.Errorf("bridge: --model-config %s: need num_hidden_layers, num_attention_heads (or num_key_value_heads) and head_dim (or hidden_size); give --kv-bytes-per-token instead", path)
	}
	dtype := strings.ToLower(kvCacheDtype)
	if dtype == "" || dtype == "auto" {
		dtype = strings.ToLower(c.Dtype)
	}
	var elem int
	switch {
	case strings.HasPrefix(dtype, "fp8"), dtype == "int8", dtype == "uint8":
		elem = 1
	case dtype == "bfloat16", dtype == "float16", dtype == "half", dtype == "bf16", dtype == "fp16", dtype == "":
		elem = 2
	case dtype == "float32", dtype == "float", dtype == "fp32":
		elem = 4
	default:
		return 0, fmt.Errorf("bridge: --model-config %s: unknown dtype %q; give --kv-bytes-per-token", path, dtype)
	}
	return 2 * c.Layers * c.KVHeads * c.HeadDim * elem, nil
}
