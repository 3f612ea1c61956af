package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"
)

// The oracle is tiktoken-go itself: the reference implementation Encode
// must agree with token for token. Tests only; production never calls it.
var (
	oracleOnce sync.Once
	oracleEnc  *tiktoken.Tiktoken
	oracleErr  error
)

func oracle(tb testing.TB) *tiktoken.Tiktoken {
	tb.Helper()
	oracleOnce.Do(func() {
		tiktoken.SetBpeLoader(loader.NewOfflineLoader())
		oracleEnc, oracleErr = tiktoken.GetEncoding(Encoding)
	})
	if oracleErr != nil {
		tb.Fatal(oracleErr)
	}
	return oracleEnc
}

func newTokenizer(tb testing.TB) *Tokenizer {
	tb.Helper()
	tk, err := New()
	if err != nil {
		tb.Fatal(err)
	}
	return tk
}

// oracleEncode is tiktoken-go's EncodeOrdinary as []uint32.
func oracleEncode(tb testing.TB, text string) []uint32 {
	ids := oracle(tb).EncodeOrdinary(text)
	out := make([]uint32, len(ids))
	for i, id := range ids {
		out[i] = uint32(id)
	}
	return out
}

// diffTokens describes the first difference between got and want, or
// returns "" when they are equal.
func diffTokens(tk *Tokenizer, got, want []uint32) string {
	n := min(len(got), len(want))
	for i := range n {
		if got[i] != want[i] {
			lo := max(0, i-3)
			return fmt.Sprintf("first difference at token %d of %d/%d: got %d %q, want %d %q; context got %q want %q",
				i, len(got), len(want), got[i], tk.Decode(got[i:i+1]), want[i], tk.Decode(want[i:i+1]),
				tk.Decode(got[lo:min(len(got), i+3)]), tk.Decode(want[lo:min(len(want), i+3)]))
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d (equal for the first %d)", len(got), len(want), n)
	}
	return ""
}

func checkMatchesOracle(t *testing.T, tk *Tokenizer, name, text string) {
	t.Helper()
	got, want := tk.Encode(text), oracleEncode(t, text)
	if d := diffTokens(tk, got, want); d != "" {
		t.Errorf("%s: %s", name, d)
	}
}

// sharedData is the repository's reference data folder, beside the repo.
const sharedData = "../../../shared/data"

func TestEncodeMatchesTiktokenOnTraces(t *testing.T) {
	tk := newTokenizer(t)
	files, err := filepath.Glob(filepath.Join(sharedData, "traces", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no trace files under %s", sharedData)
	}
	const limit = 200 << 10
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > limit {
			data = data[:limit]
		}
		checkMatchesOracle(t, tk, filepath.Base(f), string(data))
	}
}

func TestEncodeMatchesTiktokenOnTable(t *testing.T) {
	tk := newTokenizer(t)
	cases := []struct{ name, text string }{
		{"empty", ""},
		{"english", "The quick brown fox jumps over the lazy dog. It's 3:45pm, isn't it?"},
		{"contractions", "I'm you're we've they'll he'd she's it't 'S 'T 'RE 'Ve 'M 'LL 'D 'x 'l 'r'e ''s"},
		{"contraction at end", "rock'"},
		{"apostrophe words", "'hello' \"quoted\" 'tis o'clock"},
		{"unicode case contraction", "'\u017f '\u212a 'İ 'ſt"},
		{"numbers", "1 12 123 1234 12345 1234567 3.14159 1,000,000 -42 +7e10 ٣٤٥٦ ½¼ Ⅻ"},
		{"german", "Größenwahn Straße Übermäßig ärgerlich"},
		{"french", "Ça m'a coûté très cher, n'est-ce pas ? « Oui ! »"},
		{"russian", "Привет, как дела? Всё хорошо."},
		{"greek", "Καλημέρα κόσμε"},
		{"chinese", "我们的模型在缓存中保存前缀，路由器选择最佳工作节点。"},
		{"japanese", "こんにちは世界、カタカナとひらがな。漢字も。"},
		{"korean", "안녕하세요 세계"},
		{"arabic", "مرحبا بالعالم ١٢٣"},
		{"hebrew", "שלום עולם"},
		{"hindi", "नमस्ते दुनिया"},
		{"thai", "สวัสดีชาวโลก"},
		{"emoji", "hi 👋🏽 family 👨‍👩‍👧‍👦 flags 🇺🇸🇯🇵 ❤️ ✨✨✨"},
		{"combining marks", "e\u0301 a\u0308o\u0308 n\u0303"},
		{"zero width", "a\u200bb\u200cc\u200dd\ufeffe"},
		{"unicode spaces", "a\u00a0b\u2003c\u3000d\u0085e\u2028f\u1680g"},
		{"spaces", "a  b   c    d     e"},
		{"leading trailing spaces", "   padded   "},
		{"tabs", "\tx\t\ty\t \t z\t"},
		{"newlines", "a\nb\n\nc\n\n\nd\n"},
		{"crlf", "line one\r\nline two\r\n\r\nline four\r\n"},
		{"lone cr", "a\rb\r\rc"},
		{"mixed ws", " \n \t\n  x \r\n\t y\n \n"},
		{"space before newline", "end   \nnext"},
		{"punctuation runs", "!!! ??? ... --- === ***\n;;;\r\n"},
		{"code", "func main() {\n\tfmt.Println(\"hi\")\n\tx := a[i+1] * 2 // note\n}\n"},
		{"python", "def f(x):\n    if x:\n        return {'a': [1, 2]}\n    return None\n"},
		{"json", `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"max_tokens":32}`},
		{"url", "https://example.com/path?q=1&r=two#frag user@example.org"},
		{"special token text", "<|endoftext|><|im_start|>user\nhello<|im_end|>"},
		{"symbols", "© ® ™ € £ ¥ § ¶ • … ← → ∑ ∫ √ ∞ ≠ ≤"},
		{"controls", "a\x00b\x01c\x1fd\x7fe"},
		{"invalid utf8", "ok \xff\xfe bad \xc3( trunc \xe2\x82 end\xed\xa0\x80"},
		{"replacement char", "\ufffd\ufffd x"},
		{"long word", strings.Repeat("antidisestablishmentarianism", 20)},
	}
	for _, c := range cases {
		checkMatchesOracle(t, tk, c.name, c.text)
	}
}

func TestEncodeMatchesTiktokenOnLongRuns(t *testing.T) {
	tk := newTokenizer(t)
	for _, unit := range []string{" ", "\n", "\t", "\r\n", " \n", "-", "=", "a", "ab", "1", "é", "😀", "\u3000", ". "} {
		for _, n := range []int{1, 2, 3, 7, 64, 127, 128, 129, 500, 2000} {
			run := strings.Repeat(unit, n)
			for _, text := range []string{run, "x" + run, run + "x", "x" + run + "y"} {
				checkMatchesOracle(t, tk, fmt.Sprintf("%q*%d in %q", unit, n, text[:min(len(text), 8)]), text)
			}
		}
	}
}

// TestBPEHeapMatchesScan pins that the heap merge used for long pieces
// gives the same tokens as the quadratic scan tiktoken uses.
func TestBPEHeapMatchesScan(t *testing.T) {
	tk := newTokenizer(t)
	pieces := []string{
		strings.Repeat(" ", 300),
		strings.Repeat("-", 1000),
		strings.Repeat("ab", 200),
		strings.Repeat("abracadabra", 40),
		strings.Repeat("\U0001F600", 100),
		strings.Repeat("x", 129) + "yz",
	}
	for _, p := range pieces {
		got := tk.v.appendMergedHeap(nil, p)
		want := tk.v.appendMergedScan(nil, p, nil)
		if d := diffTokens(tk, got, want); d != "" {
			t.Errorf("piece %q...: %s", p[:10], d)
		}
	}
}

func FuzzEncodeMatchesTiktoken(f *testing.F) {
	for _, s := range []string{
		"", "hello world", "It's 'S 'll", " \n\t\r\n  x", "123456 abc", "日本語 テキスト",
		"👋🏽👨‍👩‍👧", "a\u00a0\u3000b", "\xff\xfe\xc3(", "!!!\r\n\r\n", "   \n   y", "'\u017f",
	} {
		f.Add(s)
	}
	tk := newTokenizer(f)
	oracle(f)
	f.Fuzz(func(t *testing.T, text string) {
		// Long inputs only slow the oracle's quadratic merge and the
		// minimizer down; TestEncodeMatchesTiktokenOnLongRuns covers length.
		if len(text) > 512 {
			text = text[:512]
		}
		got, want := tk.Encode(text), oracleEncode(t, text)
		if d := diffTokens(tk, got, want); d != "" {
			t.Errorf("Encode(%q): %s", text, d)
		}
	})
}

// TestEncodeMatchesTiktokenOnRandomMixes concatenates fragments chosen to
// sit on the pattern's edges (apostrophes before case-varied letters,
// whitespace before letters, punctuation and newlines, digits of several
// scripts) in seeded random orders, reaching combinations byte-level
// fuzzing rarely builds.
func TestEncodeMatchesTiktokenOnRandomMixes(t *testing.T) {
	tk := newTokenizer(t)
	frags := []string{
		"'", "s", "S", "t", "re", "RE", "ve", "m", "ll", "Ll", "d", "x", "\u017f",
		" ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\v", "\f",
		"word", "Über", "日本", "Привет", "é", "e\u0301", "\u0301",
		"1", "42", "1234", "٣", "½", "Ⅻ",
		".", "!!", "--", "\"", "(", ")", "<|", "|>", "@", "_", "\x00",
		"👋", "🏽", "\u200d", "\ufeff", "\ufffd", "\xff", "\xe2\x82",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for range 3000 {
		b.Reset()
		for range 1 + rng.IntN(12) {
			b.WriteString(frags[rng.IntN(len(frags))])
		}
		checkMatchesOracle(t, tk, fmt.Sprintf("mix %q", b.String()), b.String())
		if t.Failed() {
			return
		}
	}
}
