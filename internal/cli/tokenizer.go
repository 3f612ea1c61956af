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

// openTokenizer loads a --tokenizer value.
func openTokenizer(spec string) (tokenizer.Model, error) {
	m, err := tokenizer.Open(spec)
	if errors.Is(err, tokenizer.ErrEngineTokenizer) {
		return nil, fmt.Errorf("--tokenizer engine is not available in this command; give the model's tokenizer.json (or its folder, or its HuggingFace id)")
	}
	if err != nil {
		return nil, fmt.Errorf("--tokenizer %s: %w", spec, err)
	}
	return m, nil
}
