package openai

// TokenizeRequest is the body of POST /tokenize, as vLLM serves it: a
// completion prompt, or chat messages rendered with the model's template.
type TokenizeRequest struct {
	Model    string    `json:"model,omitempty"`
	Prompt   *string   `json:"prompt,omitempty"`
	Messages []Message `json:"messages,omitempty"`
	// AddSpecialTokens defaults to true for a prompt (the engine's BOS)
	// and false for messages (the template writes its own).
	AddSpecialTokens *bool `json:"add_special_tokens,omitempty"`
	// AddGenerationPrompt defaults to true.
	AddGenerationPrompt  *bool          `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage bool           `json:"continue_final_message,omitempty"`
	ChatTemplateKwargs   map[string]any `json:"chat_template_kwargs,omitempty"`
	ReturnTokenStrs      bool           `json:"return_token_strs,omitempty"`
}

// TokenizeResponse is vLLM's answer to POST /tokenize.
type TokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
	TokenStrs   []string `json:"token_strs,omitempty"`
}
