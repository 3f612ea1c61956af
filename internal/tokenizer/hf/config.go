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
