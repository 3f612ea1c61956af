package cli

import (
	"errors"
	"flag"
	"fmt"

	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

const tokenizerUsage = "the model's tokenizer: cl100k (built in), engine (ask a worker's POST /tokenize, as vLLM serves it; cached by body digest), a tokenizer.json or the folder holding it and tokenizer_config.json, " +
	"or a HuggingFace model id (org/name) in the local cache ($HF_HOME/hub or ~/.cache/huggingface/hub; nothing is downloaded)"

func tokenizerFlag(fs *flag.FlagSet, spec *string) {
	fs.StringVar(spec, "tokenizer", "cl100k", tokenizerUsage)
}

// openTokenizer loads a --tokenizer value for a server, which must be able
// to encode chats: a tokenizer.json without a chat template it can render
// is refused here rather than on the first chat request.
func openTokenizer(spec string) (tokenizer.Model, error) {
	m, err := openTokenizerText(spec)
	if err != nil {
		return nil, err
	}
	if c, ok := m.(interface{ ChatErr() error }); ok && c.ChatErr() != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", spec, c.ChatErr())
	}
	return m, nil
}

// openTokenizerText loads a --tokenizer value; chats may be unsupported.
func openTokenizerText(spec string) (tokenizer.Model, error) {
	m, err := tokenizer.Open(spec)
	if errors.Is(err, tokenizer.ErrEngineTokenizer) {
		return nil, fmt.Errorf("--tokenizer engine is not available in this command; give the model's tokenizer.json (or its folder, or its HuggingFace id)")
	}
	if err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", spec, err)
	}
	return m, nil
}
