package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// openCached opens dir with a section cache that takes every section
// (minLen 1) and holds maxBytes.
func openCached(tb testing.TB, dir string, maxBytes int64) HF {
	tb.Helper()
	m, err := Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	h := m.(HF)
	h.sections = newSectionCache(maxBytes)
	h.sections.minLen = 1
	return h
}

// randomTurn is text with words, digits, spaces, newlines and, sometimes,
// a special token written in the text.
func randomTurn(rng *rand.Rand) string {
	words := []string{"the", "switch", "yard", " ", "  ", "\n", "\n\n", "12345", "é", "日本語", "<|im_start|>", "<|im_end|>", "don't", "🙂", "\t", "x"}
	var b strings.Builder
	for range 1 + rng.IntN(40) {
		b.WriteString(words[rng.IntN(len(words))])
		if rng.IntN(2) == 0 {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// TestSectionCacheExact: through the cache, cold and warm, the ids are
// hf's own, for text and for conversations growing a turn at a time
// (whose earlier turns are cache hits).
func TestSectionCacheExact(t *testing.T) {
	h := openCached(t, tinyDir, 1<<20)
	rng := rand.New(rand.NewPCG(11, 0))
	for i := range 300 {
		text := randomTurn(rng)
		want := h.Tokenizer.Encode(text)
		for pass := range 3 { // unknown, seen, cached
			if got := h.Encode(text); !slices.Equal(got, want) {
				t.Fatalf("text %d pass %d: %q: got %v, want %v", i, pass, text, got, want)
			}
		}
		if got, want := h.EncodePrompt(text), h.EncodeWithSpecial(text); !slices.Equal(got, want) {
			t.Fatalf("prompt %d: %q: got %v, want %v", i, text, got, want)
		}
	}
	roles := []string{"user", "assistant"}
	for conv := range 20 {
		msgs := []openai.Message{{Role: "system", Content: randomTurn(rng)}}
		for turn := range 8 {
			msgs = append(msgs, openai.Message{Role: roles[turn%2], Content: randomTurn(rng)})
			for _, o := range []ChatOptions{DefaultChat, {AddGenerationPrompt: false}} {
				got, err := h.EncodeChat(msgs, o)
				if err != nil {
					t.Fatal(err)
				}
				want, err := h.Tokenizer.EncodeChat(msgs, o)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("conversation %d turn %d %+v: got %v, want %v", conv, turn, o, got, want)
				}
			}
		}
	}
	if st := h.CacheStats(); st.Hits == 0 || st.Misses == 0 || st.Entries == 0 {
		t.Errorf("stats %+v: want hits, misses and entries", st)
	}
}

// TestSectionCacheBounded: past its byte bound the cache evicts the least
// recently used sections, and what it returns stays exact.
func TestSectionCacheBounded(t *testing.T) {
	const max = 16 << 10
	h := openCached(t, tinyDir, max)
	texts := make([]string, 200)
	for i := range texts {
		texts[i] = fmt.Sprintf("section %d: %s", i, strings.Repeat("words and more words ", 4))
	}
	for round := range 3 {
		for i, s := range texts {
			if got, want := h.Encode(s), h.Tokenizer.Encode(s); !slices.Equal(got, want) {
				t.Fatalf("round %d text %d: got %v, want %v", round, i, got, want)
			}
			if st := h.CacheStats(); st.Bytes > max {
				t.Fatalf("cache holds %d bytes, bound %d", st.Bytes, max)
			}
		}
	}
	st := h.CacheStats()
	if st.Entries == 0 || st.Entries >= len(texts) {
		t.Errorf("entries %d: want some, fewer than %d", st.Entries, len(texts))
	}
	// Cycling through more sections than fit evicts each before its reuse
	// (round 1 only marks them seen).
	if st.Hits != 0 {
		t.Errorf("hits %d: an LRU cycled past its size should have none", st.Hits)
	}
	// The most recent one is still there.
	h.Encode(texts[len(texts)-1])
	if got := h.CacheStats().Hits; got != 1 {
		t.Errorf("hits %d after repeating the last section, want 1", got)
	}
}

// TestSectionCacheSkipsShort: the default cache leaves short sections
// alone and counts nothing for them; a long one is stored when it is
// seen a second time.
func TestSectionCacheSkipsShort(t *testing.T) {
	m, err := Open(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	h := m.(HF)
	h.Encode("<|im_start|>user\nhi<|im_end|>")
	long := "<|im_start|>user\n" + strings.Repeat("a longer turn ", 30) + "<|im_end|>"
	h.Encode(long)
	if st := h.CacheStats(); st.Misses != 1 || st.Entries != 0 {
		t.Errorf("stats %+v after one sighting: want a miss and nothing stored", st)
	}
	h.Encode(long)
	h.Encode(long)
	if st := h.CacheStats(); st.Hits != 1 || st.Misses != 2 || st.Entries != 1 {
		t.Errorf("stats %+v, want two misses (the second stores it), one hit, one entry", st)
	}
}
