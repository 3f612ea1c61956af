package hf

import (
	"encoding/json"
	"fmt"
)

// chatConfig is what tokenizer_config.json says about chat.
type chatConfig struct {
	path     string
	template string
	bos, eos string
}

func (t *Tokenizer) parseConfig(path string, data []byte) error {
	var c struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		Class        string          `json:"tokenizer_class"`
		AddBOS       *bool           `json:"add_bos_token"`
		AddEOS       *bool           `json:"add_eos_token"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("tokenizer: %s: not valid JSON: %v", path, err)
	}
	t.chatConfig.path = path
	if !isNull(c.ChatTemplate) {
		if err := json.Unmarshal(c.ChatTemplate, &t.chatConfig.template); err != nil {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err2 := json.Unmarshal(c.ChatTemplate, &named); err2 != nil {
				return fmt.Errorf("tokenizer: %s: chat_template is neither a string nor a list of named templates", path)
			}
			for _, n := range named {
				if n.Name == "default" {
					t.chatConfig.template = n.Template
				}
			}
		}
	}
	var err error
	if t.chatConfig.bos, err = tokenString(c.BOS); err != nil {
		return fmt.Errorf("tokenizer: %s: bos_token: %v", path, err)
	}
	if t.chatConfig.eos, err = tokenString(c.EOS); err != nil {
		return fmt.Errorf("tokenizer: %s: eos_token: %v", path, err)
	}
	// transformers' LlamaTokenizerFast (DeepSeek V3's class) replaces the
	// file's post-processor with BOS/EOS per add_bos_token (default true)
	// and add_eos_token (default false); the engines load it so.
	if c.Class == "LlamaTokenizerFast" {
		t.prefix, t.suffix = nil, nil
		if c.AddBOS == nil || *c.AddBOS {
			id, ok := t.TokenID(t.chatConfig.bos)
			if !ok {
				return fmt.Errorf("tokenizer: %s: bos_token %q is not a token", path, t.chatConfig.bos)
			}
			t.prefix = []uint32{id}
		}
		if c.AddEOS != nil && *c.AddEOS {
			id, ok := t.TokenID(t.chatConfig.eos)
			if !ok {
				return fmt.Errorf("tokenizer: %s: eos_token %q is not a token", path, t.chatConfig.eos)
			}
			t.suffix = []uint32{id}
		}
	}
	return nil
}

// tokenString reads a special token given as a string or as an
// AddedToken object.
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("neither a string nor an AddedToken")
	}
	return obj.Content, nil
}
