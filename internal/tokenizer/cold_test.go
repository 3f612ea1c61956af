package tokenizer

import (
	"testing"

	"github.com/switchyard-llm/switchyard/internal/tokenizer/tokentest"
)

// BenchmarkEncodeCold encodes a 1,500-word prompt different from the last
// one every iteration (64 seeded texts in turn), as a cold request would.
func BenchmarkEncodeCold(b *testing.B) {
	tk := newTokenizer(b)
	texts := make([]string, 64)
	for i := range texts {
		texts[i] = tokentest.EnglishWords(1500, uint64(i+1))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tk.Encode(texts[i%len(texts)])
		i++
	}
}
