// Package tokenizer turns text into token IDs and back with a real BPE
// vocabulary (cl100k_base, shipped inside the tiktoken-go-loader module, so
// nothing downloads at run time), and renders chat messages through a simple
// chat template.
//
// A Tokenizer is safe for concurrent use. The vocabulary loads once per
// process (about 150 ms); later calls to New share it.
package tokenizer

import (
	"fmt"
	"strings"
	"sync"

	tiktoken "github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Encoding is the BPE vocabulary in use.
const Encoding = "cl100k_base"

// Tokenizer encodes and decodes text.
type Tokenizer struct {
	enc *tiktoken.Tiktoken
}

var (
	once    sync.Once
	shared  *Tokenizer
	loadErr error
)

// New returns the process-wide tokenizer.
func New() (*Tokenizer, error) {
	once.Do(func() {
		tiktoken.SetBpeLoader(loader.NewOfflineLoader())
		enc, err := tiktoken.GetEncoding(Encoding)
		if err != nil {
			loadErr = fmt.Errorf("tokenizer: load %s: %w", Encoding, err)
			return
		}
		shared = &Tokenizer{enc: enc}
	})
	return shared, loadErr
}

// Encode returns the token IDs of text. Special-token text is encoded as
// ordinary text, never as a control token.
func (t *Tokenizer) Encode(text string) []uint32 {
	ids := t.enc.EncodeOrdinary(text)
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

// Decode returns the text of ids. IDs outside the vocabulary decode to
// nothing.
func (t *Tokenizer) Decode(ids []uint32) string {
	in := make([]int, len(ids))
	for i, id := range ids {
		in[i] = int(id)
	}
	return t.enc.Decode(in)
}

// VocabSize is the number of ordinary tokens; IDs below it decode to text.
func (t *Tokenizer) VocabSize() int { return 100256 }

// ChatPrompt renders messages with a ChatML-style template and the
// assistant turn opened, the way most chat models are prompted.
func ChatPrompt(msgs []openai.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		b.WriteString("<|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String()
}
