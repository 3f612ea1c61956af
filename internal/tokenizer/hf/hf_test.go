package hf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// tinyFile builds a small byte-level BPE tokenizer.json: the 256 byte
// symbols, a few merges, and two added tokens. edit may change it before
// it is serialized.
func tinyFile(t *testing.T, pairForm bool, edit func(map[string]any)) []byte {
	t.Helper()
	vocab := map[string]any{}
	for b := range 256 {
		vocab[string(byteLevel[b])] = b
	}
	merges := [][2]string{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"Ġw", "o"}, {"Ġwo", "r"}, {"l", "d"}, {"Ġwor", "ld"}}
	next := 256
	var ms []any
	for _, m := range merges {
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = next
			next++
		}
		if pairForm {
			ms = append(ms, []string{m[0], m[1]})
		} else {
			ms = append(ms, m[0]+" "+m[1])
		}
	}
	f := map[string]any{
		"version":    "1.0",
		"truncation": nil,
		"padding":    nil,
		"added_tokens": []any{
			map[string]any{"id": 1000, "content": "<|end|>", "special": true, "lstrip": false, "rstrip": false, "normalized": false, "single_word": false},
			map[string]any{"id": 1001, "content": "<|end|>x", "special": false, "lstrip": true, "rstrip": true, "normalized": false, "single_word": false},
		},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}}},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patternQwen}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|end|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<|end|>": map[string]any{"id": "<|end|>", "ids": []int{1000}, "tokens": []string{"<|end|>"}}}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model":   map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "byte_fallback": false, "vocab": vocab, "merges": ms},
	}
	if edit != nil {
		edit(f)
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func tiny(t *testing.T, pairForm bool) *Tokenizer {
	t.Helper()
	tk, err := Parse("tiny.json", tinyFile(t, pairForm, nil))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestMergesBothForms(t *testing.T) {
	for _, pair := range []bool{false, true} {
		tk := tiny(t, pair)
		got := tk.Encode("hello world")
		hello, _ := tk.TokenID("hello")
		world, _ := tk.TokenID(" world")
		if want := []uint32{hello, world}; !reflect.DeepEqual(got, want) {
			t.Errorf("pair form %v: Encode(hello world) = %v, want %v", pair, got, want)
		}
		if d := tk.Decode(got); d != "hello world" {
			t.Errorf("Decode = %q", d)
		}
	}
}

func TestAddedTokens(t *testing.T) {
	tk := tiny(t, false)
	h, _ := tk.TokenID("hello")
	sp := uint32(' ')
	for _, c := range []struct {
		in   string
		want []uint32
	}{
		{"hello<|end|>hello", []uint32{h, 1000, h}},
		// The longer <|end|>x wins, and its lstrip/rstrip eat the spaces
		// around it.
		{"hello  <|end|>x  hello", []uint32{h, 1001, h}},
		{"hello <|end|> hello", []uint32{h, sp, 1000, sp, h}},
		{"<|end|", []uint32{'<', '|', 'e', 'n', 'd', '|'}},
	} {
		// Byte ids equal byte values in the tiny vocabulary, except where
		// a merge applies.
		if got := tk.Encode(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	if got := tk.EncodeWithSpecial("hello"); !reflect.DeepEqual(got, []uint32{1000, h}) {
		t.Errorf("EncodeWithSpecial = %v, want the template's <|end|> first", got)
	}
	if got := tk.DecodeSkipSpecial([]uint32{1000, h, 1001}); got != "hello<|end|>x" {
		t.Errorf("DecodeSkipSpecial = %q", got)
	}
}

func TestNFC(t *testing.T) {
	tk := tiny(t, false)
	// e + combining acute composes to é (2 bytes) before BPE.
	if got, want := tk.Encode("e\u0301"), tk.Encode("\u00e9"); !reflect.DeepEqual(got, want) {
		t.Errorf("NFC: %v, want %v", got, want)
	}
}

func TestToValidUTF8(t *testing.T) {
	for in, want := range map[string]string{
		"abc":                  "abc",
		"a\x80b":               "a\uFFFDb",
		"\xe2\x82A":            "\uFFFDA",            // one replacement for a truncated sequence
		"\xed\xa0\x80":         "\uFFFD\uFFFD\uFFFD", // a surrogate is three bad bytes
		"\xc0\x80":             "\uFFFD\uFFFD",       // overlong
		"\xf0\x9f\x98":         "\uFFFD",             // truncated emoji
		"\xf0\x9f\x98\x80\xff": "\U0001F600\uFFFD",
		"\xf4\x90\x80\x80":     "\uFFFD\uFFFD\uFFFD\uFFFD",
	} {
		if got := ToValidUTF8(in); got != want {
			t.Errorf("ToValidUTF8(%q) = %q, want %q", in, got, want)
		}
	}
}

// pieces runs a matcher as an Isolated Split.
func pieces(m matcher, s string) []string {
	var out []string
	gap := -1
	for i := 0; i < len(s); {
		if end, ok := m.match(s, i); ok {
			if gap >= 0 {
				out = append(out, s[gap:i])
				gap = -1
			}
			out = append(out, s[i:end])
			i = end
			continue
		}
		if gap < 0 {
			gap = i
		}
		_, n := runeAt(s, i)
		i += n
	}
	if gap >= 0 {
		out = append(out, s[gap:])
	}
	return out
}

func TestPatterns(t *testing.T) {
	for _, c := range []struct {
		m    matcher
		in   string
		want []string
	}{
		{knownPattern(patternLlama3), "Hello world  123456 don't\r\n\n  x", []string{"Hello", " world", " ", " ", "123", "456", " don", "'t", "\r\n\n", " ", " x"}},
		{knownPattern(patternQwen), "ab12 !?\n", []string{"ab", "1", "2", " !?\n"}},
		{knownPattern(patternLlama3), "end   ", []string{"end", "   "}},
		{knownPattern(patternLlama3), "'S 'Ll'x", []string{"'S", " '", "Ll", "'x"}},
		{knownPattern(patternDeepSeekMain), "a.b 1x\u200d!", []string{"a", ".b", " ", "1x", "\u200d", "!"}},
		{knownPattern(patternDeepSeekCJK), "ab漢字かなcd", []string{"ab", "漢字かな", "cd"}},
		{knownPattern(patternDeepSeekDigits), "x1234567", []string{"x", "123", "456", "7"}},
	} {
		if got := pieces(c.m, c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%T on %q = %q, want %q", c.m, c.in, got, c.want)
		}
	}
}

func TestRefusals(t *testing.T) {
	set := func(path string, v any) func(map[string]any) {
		return func(f map[string]any) {
			keys := strings.Split(path, ".")
			m := f
			for _, k := range keys[:len(keys)-1] {
				m = m[k].(map[string]any)
			}
			m[keys[len(keys)-1]] = v
		}
	}
	for _, c := range []struct {
		edit func(map[string]any)
		want string
	}{
		{set("normalizer", map[string]any{"type": "NFKC"}), `normalizer "NFKC"`},
		{set("model.type", "Unigram"), `model type "Unigram"`},
		{set("pre_tokenizer", map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+(?=x)`}, "behavior": "Isolated"}), `Split regex "\\w+(?=x)"`},
		{set("pre_tokenizer", map[string]any{"type": "Metaspace"}), `pre_tokenizer "Metaspace"`},
		{set("pre_tokenizer", map[string]any{"type": "Digits"}), "no ByteLevel step"},
		{set("decoder", map[string]any{"type": "WordPiece"}), `decoder "WordPiece"`},
		{set("post_processor", map[string]any{"type": "BertProcessing"}), `post_processor "BertProcessing"`},
		{set("truncation", map[string]any{"max_length": 8}), "truncation is set"},
		{set("model.merges", []any{"h zz"}), `model.merges: merges[0] ("h", "zz")`},
		{set("model.merges", 7), "model.merges: at byte 0: want"},
	} {
		_, err := Parse("bad/tokenizer.json", tinyFile(t, false, c.edit))
		if err == nil || !strings.Contains(err.Error(), "bad/tokenizer.json") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming the file and %s, got %v", c.want, err)
		}
	}
	if _, err := Parse("corrupt.json", []byte(`{"model": `)); err == nil || !strings.Contains(err.Error(), "corrupt.json: not a valid tokenizer.json") {
		t.Errorf("corrupt file: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "nope")); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing file: %v", err)
	}
}

func TestLoadFolderWithConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tinyFile(t, true, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := `{"chat_template": "{{ bos_token }}", "bos_token": {"content": "<|end|>", "__type": "AddedToken"}, "eos_token": "<|end|>"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if tk.chatConfig.bos != "<|end|>" || tk.chatConfig.template != "{{ bos_token }}" {
		t.Errorf("config = %+v", tk.chatConfig)
	}
}

// TestWriteTinyFixture writes the tiny tokenizer, with Qwen3's chat
// template, to internal/tokenizer/testdata/tiny-qwen3 for the other
// packages' tests (run with -args -write-tiny after changing tinyFile).
func TestWriteTinyFixture(t *testing.T) {
	dir := filepath.Join("..", "testdata", "tiny-qwen3")
	want := tinyFile(t, false, nil)
	got, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err == nil && string(got) == string(want) {
		return
	}
	if os.Getenv("WRITE_TINY") == "" {
		t.Fatalf("%s/tokenizer.json is missing or stale: rerun with WRITE_TINY=1", dir)
	}
	tmpl, err := os.ReadFile("testdata/templates/qwen3.jinja")
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.MarshalIndent(map[string]any{"chat_template": string(tmpl), "eos_token": "<|end|>", "tokenizer_class": "Qwen2Tokenizer"}, "", " ")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestASCIIClasses pins the ASCII class table to the Unicode predicates
// it stands in for, and \s to ECMAScript's (no U+001C-U+001F, unlike
// unicode.IsSpace's U+0085 and Python's str.isspace).
func TestASCIIClasses(t *testing.T) {
	for r := range rune(utf8.RuneSelf) {
		space := r == '\t' || r == '\n' || r == '\v' || r == '\f' || r == '\r' || r == ' '
		for _, c := range []struct {
			name      string
			got, want bool
		}{
			{"letter", isLetter(r), unicode.IsLetter(r)},
			{"number", isNumber(r), unicode.IsNumber(r)},
			{"punct/symbol", isPunctSymbol(r), unicode.IsPunct(r) || unicode.IsSymbol(r)},
			{"space", isSpace(r), space},
			{"other", isOther(r), !unicode.IsLetter(r) && !unicode.IsNumber(r) && !space},
		} {
			if c.got != c.want {
				t.Errorf("%q: %s = %v, want %v", r, c.name, c.got, c.want)
			}
		}
	}
	for _, re := range []string{patternDeepSeekDigits, patternDeepSeekCJK} {
		m := knownPattern(re).(runMatcher)
		for r := range rune(utf8.RuneSelf) {
			if got, want := asciiFlags[r]&m.fl != 0, m.in(r); got != want {
				t.Errorf("%s on %q: ASCII flag says %v, the class %v", re, r, got, want)
			}
		}
	}
}

func TestIsASCII(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"", true}, {"plain words, 12345678!", true}, {"seven b", true},
		{"eight by\u00e9", false}, {"\u00e9", false}, {strings.Repeat("a", 16) + "\x80", false}, {"abcdefg\xffabcdefgh", false},
	} {
		if got := isASCII(c.s); got != c.want {
			t.Errorf("isASCII(%q) = %v, want %v", c.s, got, c.want)
		}
	}
}
