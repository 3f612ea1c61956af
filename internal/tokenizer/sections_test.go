package tokenizer

import (
	"fmt"
	"hash/maphash"
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
	// The most recent one is still there. The doorkeeper keys its 64 Ki
	// slots by a random seed, so two of the 200 sections can share one,
	// and each then keeps the other from being stored: take the most
	// recent section whose slot is its own.
	slot := func(s string) uint64 { return maphash.String(h.sections.seed, s) & (1<<doorkeeperBits - 1) }
	slots := map[uint64]int{}
	for _, s := range texts {
		slots[slot(s)]++
	}
	last := len(texts) - 1
	for slots[slot(texts[last])] > 1 {
		last--
	}
	h.Encode(texts[last])
	if got := h.CacheStats().Hits; got != 1 {
		t.Errorf("hits %d after repeating section %d, the most recent with a doorkeeper slot of its own; want 1", got, last)
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

// cl100kTurns is cl100k with a turn cache that takes every turn.
func cl100kTurns(tb testing.TB) Cl100k {
	tb.Helper()
	c, err := NewCl100k()
	if err != nil {
		tb.Fatal(err)
	}
	c.turns = newSectionCache(1 << 20)
	c.turns.minLen = 1
	return c
}

// checkTurns encodes msgs through the turn cache three times (unknown,
// seen, cached) and compares each with the whole prompt's encoding.
func checkTurns(tb testing.TB, c Cl100k, msgs []openai.Message) {
	tb.Helper()
	want := c.Encode(ChatPrompt(msgs))
	for pass := range 3 {
		got, err := c.EncodeChat(msgs, ChatOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		if !slices.Equal(got, want) {
			tb.Fatalf("pass %d: %q: got %v, want %v", pass, ChatPrompt(msgs), got, want)
		}
	}
}

// TestCl100kTurnsExact: conversations growing a turn at a time, with
// markers, white space and digits in the text, encode through the turn
// cache as the whole prompt does; the earlier turns are cache hits.
func TestCl100kTurnsExact(t *testing.T) {
	c := cl100kTurns(t)
	rng := rand.New(rand.NewPCG(12, 0))
	roles := []string{"system", "user", "assistant", "tool", ""}
	for range 40 {
		var msgs []openai.Message
		for range 1 + rng.IntN(6) {
			msgs = append(msgs, openai.Message{Role: roles[rng.IntN(len(roles))], Content: randomTurn(rng)})
			checkTurns(t, c, msgs)
		}
	}
	if st := c.CacheStats(); st.Hits == 0 || st.Entries == 0 {
		t.Errorf("turn cache %+v, want hits", st)
	}
	if n := turnLen("<|im_start|>user\na<|im_end|>\nb<|im_end|>\n<|im_start|>"); n != len("<|im_start|>user\na<|im_end|>\nb<|im_end|>\n") {
		t.Errorf("turnLen skips a turnEnd not followed by <: got %d", n)
	}
}

// FuzzCl100kTurns: any conversation encodes through the turn cache as
// its whole prompt does. The input is split at 0xff bytes into
// alternating roles and contents.
func FuzzCl100kTurns(f *testing.F) {
	for _, s := range []string{
		"user\xffhello there",
		"system\xffYou are terse.  \n\xffuser\xffWhat's 12345?\n\n\xffassistant\xff<|im_end|>\n<|im_start|>",
		"user\xff \xffuser\xff\n\xffuser\xff\t\xffuser\xff<|im_end|>\n",
		"user\xff\xc3(\xffuser\xff日本語 🙂",
	} {
		f.Add([]byte(s))
	}
	c := cl100kTurns(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		parts := strings.Split(string(data), "\xff")
		var msgs []openai.Message
		for i := 0; i+1 < len(parts); i += 2 {
			msgs = append(msgs, openai.Message{Role: parts[i], Content: parts[i+1]})
		}
		if len(msgs) == 0 {
			return
		}
		checkTurns(t, c, msgs)
	})
}
