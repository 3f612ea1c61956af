package tokenizer

import (
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

func TestRoundTrip(t *testing.T) {
	tk, err := New()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"", "hello world", "Ünïcödé and 数字 123", "<|endoftext|> is text here"} {
		ids := tk.Encode(s)
		if got := tk.Decode(ids); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
	}
	if n := len(tk.Encode("hello world")); n != 2 {
		t.Errorf("len(Encode(hello world)) = %d, want 2 (cl100k_base)", n)
	}
}

func TestChatPrompt(t *testing.T) {
	got := ChatPrompt([]openai.Message{{Role: "user", Content: "hi"}})
	want := "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("ChatPrompt = %q, want %q", got, want)
	}
}

func TestDecodeMatchesTiktoken(t *testing.T) {
	tk := newTokenizer(t)
	ids := []uint32{0, 1, 9906, 1917, 100255, 100257, 100276, 100256, 100261, 100277, 1 << 31}
	// IDs in the holes between specials and past the end decode to nothing
	// in both.
	in := make([]int, len(ids))
	for i, id := range ids {
		in[i] = int(id)
	}
	want := oracle(t).Decode(in)
	if got := tk.Decode(ids); got != want {
		t.Errorf("Decode(%v) = %q, want %q", ids, got, want)
	}
	if got := tk.Decode([]uint32{100257}); got != "<|endoftext|>" {
		t.Errorf("Decode(100257) = %q, want <|endoftext|>", got)
	}
}

func TestVocabSize(t *testing.T) {
	tk := newTokenizer(t)
	if got := tk.VocabSize(); got != 100256 {
		t.Errorf("VocabSize = %d, want 100256", got)
	}
	for _, id := range []uint32{0, 100255} {
		if tk.Decode([]uint32{id}) == "" {
			t.Errorf("Decode(%d) is empty; ordinary IDs below VocabSize must decode", id)
		}
	}
}

// essay is a deterministic n-word English prompt, the same generator the
// simulated engine's tests use, so figures compare across packages.
func essay(n, seed int) string {
	words := strings.Fields("switchyard routes requests to workers that already hold the prefix of the prompt in their cache and moves blocks across the link only when that is faster than recomputing them locally on the decode worker")
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[(i*7+seed*13+i/len(words))%len(words)])
	}
	return b.String()
}

func TestAppendEncodeAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector: sync.Pool drops items at random")
	}
	tk := newTokenizer(t)
	text := essay(1500, 1) + " It's 12345 \n\n  end --- " + strings.Repeat(" ", 300) + "x"
	dst := make([]uint32, 0, 4096)
	want := oracleEncode(t, text)
	if d := diffTokens(tk, tk.AppendEncode(dst, text), want); d != "" {
		t.Fatalf("AppendEncode: %s", d)
	}
	allocs := testing.AllocsPerRun(50, func() {
		dst = tk.AppendEncode(dst[:0], text)
	})
	if allocs != 0 {
		t.Errorf("AppendEncode allocates %.1f times per call, want 0", allocs)
	}
}

func TestEncodeConcurrent(t *testing.T) {
	tk := newTokenizer(t)
	texts := []string{essay(300, 1), essay(200, 2) + strings.Repeat("-", 500), "naïve café 日本 👋🏽 it's"}
	want := make([][]uint32, len(texts))
	for i, s := range texts {
		want[i] = oracleEncode(t, s)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(texts))
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 20 {
				i := (g + k) % len(texts)
				if d := diffTokens(tk, tk.Encode(texts[i]), want[i]); d != "" {
					errs <- d
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for d := range errs {
		t.Error(d)
	}
}

// BenchmarkEncode1500Words compares tiktoken-go's EncodeOrdinary with
// Encode on the same 1,500-word prompt; both results are checked equal
// before timing.
func BenchmarkEncode1500Words(b *testing.B) {
	tk := newTokenizer(b)
	text := essay(1500, 1)
	want := oracleEncode(b, text)
	if d := diffTokens(tk, tk.Encode(text), want); d != "" {
		b.Fatal(d)
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(len(want))*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	}
	b.Run("tiktoken-go", func(b *testing.B) {
		enc := oracle(b)
		b.ReportAllocs()
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			enc.EncodeOrdinary(text)
		}
		report(b)
	})
	b.Run("switchyard", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tk.Encode(text)
		}
		report(b)
	})
	b.Run("switchyard-append", func(b *testing.B) {
		dst := make([]uint32, 0, 2*len(want))
		b.ReportAllocs()
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			dst = tk.AppendEncode(dst[:0], text)
		}
		report(b)
	})
}

// BenchmarkEncodeLongRun encodes a single 10,000-byte piece (a dash rule),
// where tiktoken's merge rescans every pair per merge and the heap merge
// does not.
func BenchmarkEncodeLongRun(b *testing.B) {
	tk := newTokenizer(b)
	text := strings.Repeat("-", 10000)
	if d := diffTokens(tk, tk.Encode(text), oracleEncode(b, text)); d != "" {
		b.Fatal(d)
	}
	b.Run("tiktoken-go", func(b *testing.B) {
		enc := oracle(b)
		b.ReportAllocs()
		for b.Loop() {
			enc.EncodeOrdinary(text)
		}
	})
	b.Run("switchyard", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tk.Encode(text)
		}
	})
}

func BenchmarkNew(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := loadVocab(); err != nil {
			b.Fatal(err)
		}
	}
}
