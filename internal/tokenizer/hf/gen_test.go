package hf

import (
	"math/rand/v2"
	"strings"
	"unicode"
)

// genText returns a random test string for the tokenizer comparisons:
// words in many scripts, CJK, emoji with ZWJ and modifiers, digits of
// every kind, code, runs of every kind of white space, \r\n, contractions,
// combining marks (so NFC has work), invalid UTF-8, and the family's
// added tokens written in the text (whole and broken). Only code points
// assigned in Go's Unicode tables are used, since the oracle's JavaScript
// may know a newer Unicode version.
func genText(rng *rand.Rand, specials []string) string {
	var b strings.Builder
	n := 1 + rng.IntN(12)
	if rng.IntN(10) == 0 {
		n += rng.IntN(60)
	}
	for range n {
		genFragment(rng, &b, specials)
	}
	return b.String()
}

var (
	genWords = []string{"the", "The", "hello", "world", "don't", "I'm", "we'll", "they've", "she'd", "it's", "You're",
		"DON'T", "I'M", "'S", "'ll", "'Re", "o'clock", "rock'n'roll", "naïve", "café", "Straße", "ﬁnance", "ǅemal",
		"mañana", "Ελληνικά", "λόγος", "Москва", "привет", "мир", "שלום", "עולם", "مرحبا", "العربية", "नमस्ते", "हिन्दी",
		"ภาษาไทย", "สวัสดี", "한국어", "안녕하세요", "中文", "你好世界", "日本語", "ひらがな", "カタカナ", "ｶﾀｶﾅ", "漢字かな交じり文",
		"Tiếng", "Việt", "ქართული", "Հայերեն", "ᏣᎳᎩ", "ꦗꦮ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝐁𝐨𝐥𝐝", "Ⅻ", "①②③", "²³", "½", "٣٤٥", "१२३",
		"１２３", "12", "123", "1234", "12345", "3.14159", "1,000,000", "0x1F", "1e-9", "v2.0.1", "2026-12-01",
		"func", "main()", "x:=1", "if(a&&b){", "}", "return;", "#include", "<stdio.h>", "=>", "!==", "->", "::", "...",
		"/*", "*/", "//", "#", "@user", "http://example.com/a?b=c&d=e", "a_b_c", "CamelCase", "snake_case", "__init__",
		"\"quoted\"", "'single'", "`tick`", "«»", "“smart”", "‘q’", "—", "–", "…", "¿", "¡", "§", "©", "®", "™", "€", "£", "¥", "₹",
		"😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🇯🇵", "1️⃣", "#️⃣", "🧑🏿‍🚀", "👩‍💻", "✨", "🤖", "☕", "⚡",
		"e\u0301", "a\u0308", "o\u0302\u0323", "\u1100\u1161\u11a8", "\u304b\u3099", "A\u030a", "\u0915\u093c",
		"\u200b", "\u200d", "\u200c", "\u2060", "\ufeff", "\u00ad", "\u0085", "\u0000", "\u0001", "\u001f", "\u007f",
		"\ue000", "\U000F0000", "\ufffd", "\ufffe",
	}
	genSpaces = []string{" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ",
		" \t ", "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f", "\u205f", "\u1680", "\u2028", "\u2029", "\v", "\f",
		"\u0085", "\ufeff", " \u00a0 ", "\n\n\n", "        "}
	genBadUTF8 = []string{"\x80", "\xff", "\xc0\x80", "\xe2\x82", "\xe2\x28\xa1", "\xed\xa0\x80", "\xf0\x9f\x98",
		"\xf4\x90\x80\x80", "\xf5", "\xc3", "\xe0\x80\x80", "\xf0\x80\x80\x80", "\xc2\xa0\x80"}
	genScripts = [][2]rune{{0x20, 0x7e}, {0xa0, 0x24f}, {0x300, 0x36f}, {0x370, 0x3ff}, {0x400, 0x4ff}, {0x590, 0x5ff},
		{0x600, 0x6ff}, {0x900, 0x97f}, {0xe00, 0xe7f}, {0x1100, 0x11ff}, {0x1e00, 0x1eff}, {0x2000, 0x206f},
		{0x2070, 0x209f}, {0x20a0, 0x20cf}, {0x2100, 0x214f}, {0x2150, 0x218f}, {0x2190, 0x23ff}, {0x2460, 0x24ff},
		{0x2500, 0x27bf}, {0x3000, 0x303f}, {0x3040, 0x30ff}, {0x3100, 0x312f}, {0x3130, 0x318f}, {0x4e00, 0x9fff},
		{0xac00, 0xd7a3}, {0xf900, 0xfaff}, {0xfb00, 0xfb4f}, {0xfe00, 0xfe6f}, {0xff00, 0xffef}, {0x1d400, 0x1d7ff},
		{0x1f300, 0x1faff}, {0x20000, 0x2a6df}, {0x0, 0x10ffff}}
)

func genFragment(rng *rand.Rand, b *strings.Builder, specials []string) {
	switch k := rng.IntN(100); {
	case k < 40:
		b.WriteString(genWords[rng.IntN(len(genWords))])
	case k < 62:
		b.WriteString(genSpaces[rng.IntN(len(genSpaces))])
	case k < 75:
		// Random runes from one block.
		sc := genScripts[rng.IntN(len(genScripts))]
		for range 1 + rng.IntN(8) {
			r := sc[0] + rune(rng.IntN(int(sc[1]-sc[0]+1)))
			if isAssigned(r) {
				b.WriteRune(r)
			}
		}
	case k < 83:
		// Digit runs of every length.
		for range 1 + rng.IntN(9) {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
	case k < 88:
		b.WriteString(genBadUTF8[rng.IntN(len(genBadUTF8))])
	case k < 96 && len(specials) > 0:
		s := specials[rng.IntN(len(specials))]
		switch rng.IntN(4) {
		case 0: // broken: a prefix of the token
			s = s[:rng.IntN(len(s))]
		case 1: // glued to a word
			s = "x" + s + "y"
		}
		b.WriteString(s)
	default:
		// ASCII punctuation runs, with the apostrophe forms.
		const punct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
		for range 1 + rng.IntN(4) {
			b.WriteByte(punct[rng.IntN(len(punct))])
		}
	}
}

// isAssigned reports whether r has a general category in Go's tables
// (surrogates excluded).
func isAssigned(r rune) bool {
	if r >= 0xD800 && r <= 0xDFFF {
		return false
	}
	for _, t := range []*unicode.RangeTable{unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.Cc, unicode.Cf, unicode.Co} {
		if unicode.Is(t, r) {
			return true
		}
	}
	return false
}
