package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

func init() {
	register(command{name: "tokenize", summary: "print the token ids of stdin's text or chat messages with a model's tokenizer", run: runTokenize})
}

func runTokenize(ctx context.Context, args []string, env Env) int {
	var (
		spec, thinking               string
		messages, strs, special, cfm bool
		noGen                        bool
	)
	fs := newFlagSet("tokenize", "Reads text (or, with --messages, a JSON array of chat messages) on stdin and prints its token ids\n"+
		"as JSON, {\"count\", \"tokens\"}, the shape of POST /tokenize on vLLM, a worker and the frontend.")
	tokenizerFlag(fs, &spec)
	fs.BoolVar(&messages, "messages", false, "stdin is a JSON array of {role, content} messages, rendered with the model's chat template")
	fs.BoolVar(&strs, "strings", false, "add each token's text as \"token_strs\"")
	fs.BoolVar(&special, "add-special-tokens", true, "text: add the special tokens the engine adds to a completion prompt (Llama's <|begin_of_text|>)")
	fs.BoolVar(&noGen, "no-generation-prompt", false, "messages: do not open the assistant's turn")
	fs.BoolVar(&cfm, "continue-final-message", false, "messages: the last (assistant) message is a prefill to continue")
	fs.StringVar(&thinking, "enable-thinking", "", "messages: Qwen3's thinking switch, true or false (default: the template's)")
	if code := parseFlags(fs, args, env); code >= 0 {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(env.Stderr, "switchyard tokenize: "+format+"\n", a...)
		return code
	}
	m, err := openTokenizerText(spec)
	if err != nil {
		return fail(ExitFail, "%v", err)
	}
	in, err := io.ReadAll(env.Stdin)
	if err != nil {
		return fail(ExitFail, "read stdin: %v", err)
	}
	req := openai.TokenizeRequest{ReturnTokenStrs: strs}
	if messages {
		if err := json.Unmarshal(in, &req.Messages); err != nil {
			return fail(ExitUsage, "--messages: stdin is not a JSON array of messages: %v", err)
		}
		gen := !noGen && !cfm
		req.AddGenerationPrompt = &gen
		req.ContinueFinalMessage = cfm
		if thinking != "" {
			b, err := strconv.ParseBool(thinking)
			if err != nil {
				return fail(ExitUsage, "--enable-thinking %q: want true or false", thinking)
			}
			req.ChatTemplateKwargs = map[string]any{"enable_thinking": b}
		}
	} else {
		text := string(in)
		req.Prompt = &text
		req.AddSpecialTokens = &special
	}
	toks, err := tokenizer.Tokenize(m, &req)
	if err != nil {
		return fail(ExitFail, "%v", err)
	}
	out := openai.TokenizeResponse{Count: len(toks), Tokens: toks}
	if out.Tokens == nil {
		out.Tokens = []uint32{}
	}
	if strs {
		for _, id := range toks {
			out.TokenStrs = append(out.TokenStrs, m.Decode([]uint32{id}))
		}
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(struct {
		Tokenizer string   `json:"tokenizer"`
		Count     int      `json:"count"`
		Tokens    []uint32 `json:"tokens"`
		TokenStrs []string `json:"token_strs,omitempty"`
	}{m.Name(), out.Count, out.Tokens, out.TokenStrs}); err != nil {
		return fail(ExitFail, "%v", err)
	}
	return ExitOK
}
