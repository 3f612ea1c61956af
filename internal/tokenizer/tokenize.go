package tokenizer

import (
	"errors"
	"fmt"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Encoder is the part of a Model that turns requests into ids: what the
// frontend needs, and what a remote ("engine") tokenizer can provide.
type Encoder interface {
	Encode(text string) []uint32
	EncodePrompt(text string) []uint32
	EncodeChat(msgs []openai.Message, o ChatOptions) ([]uint32, error)
}

// Tokenize answers a POST /tokenize body with e, with vLLM's defaults:
// a prompt gets the engine's special tokens unless add_special_tokens is
// false; messages get the generation prompt unless add_generation_prompt
// is false. The error is the client's.
func Tokenize(e Encoder, req *openai.TokenizeRequest) ([]uint32, error) {
	switch {
	case req.Prompt != nil && len(req.Messages) > 0:
		return nil, errors.New("give either prompt or messages, not both")
	case req.Prompt != nil:
		if req.AddSpecialTokens == nil || *req.AddSpecialTokens {
			return e.EncodePrompt(*req.Prompt), nil
		}
		return e.Encode(*req.Prompt), nil
	case len(req.Messages) > 0:
		if req.AddSpecialTokens != nil && *req.AddSpecialTokens {
			return nil, errors.New("add_special_tokens with messages is not supported: the chat template writes the special tokens")
		}
		o, err := ChatOptionsOf(req.AddGenerationPrompt, req.ContinueFinalMessage, req.ChatTemplateKwargs)
		if err != nil {
			return nil, err
		}
		return e.EncodeChat(req.Messages, o)
	}
	return nil, errors.New("prompt or messages is required")
}

// ChatOptionsOf reads the chat-template switches of a request: vLLM's
// add_generation_prompt (default true unless continue_final_message),
// continue_final_message and chat_template_kwargs (only enable_thinking
// is understood; another key is refused rather than ignored, since the
// engine would render it).
func ChatOptionsOf(addGen *bool, cont bool, kwargs map[string]any) (ChatOptions, error) {
	o := ChatOptions{AddGenerationPrompt: !cont, ContinueFinalMessage: cont}
	if addGen != nil {
		o.AddGenerationPrompt = *addGen
	}
	for k, v := range kwargs {
		if k != "enable_thinking" {
			return o, fmt.Errorf("chat_template_kwargs.%s is not supported here (only enable_thinking); use --tokenizer engine", k)
		}
		b, ok := v.(bool)
		if !ok {
			return o, fmt.Errorf("chat_template_kwargs.enable_thinking must be true or false")
		}
		o.EnableThinking = &b
	}
	return o, nil
}
