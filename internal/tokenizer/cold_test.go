package tokenizer

import (
	"github.com/switchyard-llm/switchyard/internal/openai"
	"strconv"
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

// BenchmarkEncodeNextTurn encodes a conversation's next turn with cl100k:
// 1,400 words of earlier turns the turn cache holds, then a new 100-word
// user message every iteration, as proxybench's next-turn case sends.
//
//	go test -run '^$' -bench EncodeNextTurn -count 6 ./internal/tokenizer
func BenchmarkEncodeNextTurn(b *testing.B) {
	c, err := NewCl100k()
	if err != nil {
		b.Fatal(err)
	}
	earlier := tokentest.EarlierTurns()
	news := make([]string, 64)
	for i := range news {
		news[i] = tokentest.EnglishWords(100, uint64(100+i))
	}
	msgs := append(earlier, openai.Message{Role: "user"})
	for range 2 { // seen twice, the earlier turns are admitted to the cache
		msgs[len(msgs)-1].Content = news[0]
		if _, err := c.EncodeChat(msgs, ChatOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		// A number of its own keeps every new turn out of the cache.
		msgs[len(msgs)-1].Content = news[i%len(news)] + " " + strconv.Itoa(i)
		if _, err := c.EncodeChat(msgs, ChatOptions{}); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if st := c.CacheStats(); st.Hits == 0 {
		b.Fatalf("no turn-cache hits: %+v", st)
	}
}
