package hf

import (
	"unicode"
	"unicode/utf8"
)

// The Split pre-tokenizers of the supported families use regexes with a
// \s+(?!\S) lookahead, which Go's RE2 cannot express, so each known
// pattern has a hand-written matcher here. A pattern that is not listed
// below is refused when the file loads: a near miss would tokenize
// differently, silently.
//
// Each matcher answers "is there a match starting at s[i], and where does
// it end", with the leftmost-first alternation of a backtracking engine,
// which is what both the engines (Oniguruma in HuggingFace tokenizers) and
// the test oracle (JavaScript RegExp with the u flag, in transformers.js)
// run. The character classes follow the oracle's JavaScript semantics:
// \s is ECMAScript white space plus line terminators (U+FEFF yes, U+0085
// no), \p{L}, \p{N}, \p{M}, \p{P} and \p{S} are the Unicode general
// categories, and (?i:'s|…) is ASCII case-insensitive.

// Known Split patterns, exactly as they appear in tokenizer.json (after
// JSON unescaping).
const (
	// Llama 3.x: cl100k_base's pattern.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Qwen2, Qwen2.5, Qwen3: the same with single digits.
	patternQwen = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// DeepSeek V3 (and R1): three Splits in sequence.
	patternDeepSeekDigits = `\p{N}{1,3}`
	patternDeepSeekCJK    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patternDeepSeekMain   = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// matcher finds the regex match that starts at s[i], if any.
type matcher interface {
	match(s string, i int) (end int, ok bool)
}

// knownPattern returns the matcher of a Split regex, or nil.
func knownPattern(re string) matcher {
	switch re {
	case patternLlama3:
		return gpt4Matcher{maxDigits: 3}
	case patternQwen:
		return gpt4Matcher{maxDigits: 1}
	case patternDeepSeekDigits:
		return runMatcher{in: isNumber, fl: flNumber, max: 3}
	case patternDeepSeekCJK:
		return runMatcher{in: isDeepSeekCJK} // no ASCII rune is in the class
	case patternDeepSeekMain:
		return deepSeekMatcher{}
	}
	return nil
}

// isSpace is ECMAScript's \s: WhiteSpace and LineTerminator.
func isSpace(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiFlags[r]&flSpace != 0
	}
	switch r {
	case 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// ASCII character classes, looked up in asciiFlags so that the common
// case of English text and code takes no Unicode table lookup and no
// rune decoding.
const (
	flLetter   = 1 << iota // \p{L}
	flNumber               // \p{N}
	flSpace                // \s
	flPunctSym             // [\p{P}\p{S}]
	flOther                // [^\s\p{L}\p{N}]
)

var asciiFlags = func() (t [utf8.RuneSelf]uint8) {
	for c := range rune(utf8.RuneSelf) {
		var f uint8
		switch {
		case 'a' <= c|0x20 && c|0x20 <= 'z':
			f = flLetter
		case '0' <= c && c <= '9':
			f = flNumber
		case c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' || c == ' ':
			f = flSpace
		}
		if c > ' ' && c < 0x7F && f == 0 {
			f |= flPunctSym
		}
		if f&(flLetter|flNumber|flSpace) == 0 {
			f |= flOther
		}
		t[c] = f
	}
	return t
}()

func isLetter(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiFlags[r]&flLetter != 0
	}
	return unicode.IsLetter(r)
}

func isNumber(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiFlags[r]&flNumber != 0
	}
	return unicode.IsNumber(r)
}

func isMark(r rune) bool { return r >= 0x300 && unicode.IsMark(r) }

// isPunctSymbol is [\p{P}\p{S}].
func isPunctSymbol(r rune) bool {
	if r < utf8.RuneSelf {
		return asciiFlags[r]&flPunctSym != 0
	}
	return unicode.IsPunct(r) || unicode.IsSymbol(r)
}

func isDeepSeekCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FA5) || (r >= 0x3040 && r <= 0x309F) || (r >= 0x30A0 && r <= 0x30FF)
}

func isASCIIAlpha(c byte) bool { return c < utf8.RuneSelf && asciiFlags[c]&flLetter != 0 }

// isASCIIPunct is [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]: the ASCII
// runes in [\p{P}\p{S}].
func isASCIIPunct(r rune) bool { return r < utf8.RuneSelf && asciiFlags[r]&flPunctSym != 0 }

func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// runWhile returns the end of the run of runes starting at s[i] for which
// in is true; fl is in's ASCII flag, so that ASCII runs are scanned
// byte by byte without calling in.
func runWhile(s string, i int, fl uint8, in func(rune) bool) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if asciiFlags[c]&fl == 0 {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if !in(r) {
			return i
		}
		i += n
	}
	return i
}

// newlineRun returns the end of the run of '\r' and '\n' starting at s[i].
func newlineRun(s string, i int) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// spaceTail matches \s*[\r\n]+|\s+(?!\S)|\s+ at s[i], whose rune r (n
// bytes) is white space.
func spaceTail(s string, i int, r rune, n int) int {
	end, last, afterNewline := i+n, i, -1
	if r == '\r' || r == '\n' {
		afterNewline = end
	}
	for end < len(s) {
		r2, n2 := runeAt(s, end)
		if !isSpace(r2) {
			break
		}
		last = end
		end += n2
		if r2 == '\r' || r2 == '\n' {
			afterNewline = end
		}
	}
	switch {
	case afterNewline >= 0: // \s*[\r\n]+ backtracks to just after the last newline.
		return afterNewline
	case end == len(s): // \s+(?!\S) at the end of the text.
		return end
	case last > i: // \s+(?!\S) leaves the last space to the next piece.
		return last
	}
	return end // \s+ of one rune before a non-space.
}

// gpt4Matcher is the cl100k-style pattern of Llama 3 (maxDigits 3) and
// Qwen (maxDigits 1):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Every rune starts some alternative, so its matches tile the text.
type gpt4Matcher struct{ maxDigits int }

func isOther(r rune) bool { return !isLetter(r) && !isNumber(r) && !isSpace(r) }

func (m gpt4Matcher) match(s string, i int) (int, bool) {
	r, n := runeAt(s, i)
	if r == '\'' {
		if end := contraction(s, i+1); end > 0 {
			return end, true
		}
	}
	if isLetter(r) {
		return runWhile(s, i+n, flLetter, isLetter), true
	}
	if isNumber(r) {
		end := i + n
		for k := 1; k < m.maxDigits && end < len(s); k++ {
			r2, n2 := runeAt(s, end)
			if !isNumber(r2) {
				break
			}
			end += n2
		}
		return end, true
	}
	var next rune = -1
	if i+n < len(s) {
		next, _ = runeAt(s, i+n)
	}
	if r != '\r' && r != '\n' && next >= 0 && isLetter(next) {
		// [^\r\n\p{L}\p{N}]?\p{L}+ with the optional rune taken.
		return runWhile(s, i+n, flLetter, isLetter), true
	}
	if !isSpace(r) {
		return newlineRun(s, runWhile(s, i+n, flOther, isOther)), true
	}
	if r == ' ' && next >= 0 && isOther(next) {
		return newlineRun(s, runWhile(s, i+n+1, flOther, isOther)), true
	}
	return spaceTail(s, i, r, n), true
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d, ASCII case-insensitively,
// after the apostrophe at s[i-1]; it returns the end or 0.
func contraction(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	c := s[i] | 0x20
	if s[i] >= utf8.RuneSelf {
		return 0
	}
	switch c {
	case 's', 't', 'm', 'd':
		return i + 1
	case 'r', 'v':
		if i+1 < len(s) && s[i+1]|0x20 == 'e' {
			return i + 2
		}
	case 'l':
		if i+1 < len(s) && s[i+1]|0x20 == 'l' {
			return i + 2
		}
	}
	return 0
}

// runMatcher matches up to max (0: any number of) runes for which in is
// true, at least one.
type runMatcher struct {
	in  func(rune) bool
	fl  uint8 // in's ASCII flag: ASCII bytes are tested without calling in
	max int
}

// find returns the first match at or after s[i]: matches start where a
// rune in the class follows one that is not (or the previous match ended
// after max runes), so scanning for the first rune in the class is exact.
func (m runMatcher) find(s string, i int) (start, end int, ok bool) {
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if asciiFlags[c]&m.fl != 0 {
				end, _ := m.match(s, i)
				return i, end, true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if m.in(r) {
			end, _ := m.match(s, i)
			return i, end, true
		}
		i += n
	}
	return 0, 0, false
}

func (m runMatcher) match(s string, i int) (int, bool) {
	end := i
	for k := 0; end < len(s) && (m.max == 0 || k < m.max); k++ {
		r, n := runeAt(s, end)
		if !m.in(r) {
			break
		}
		end += n
	}
	return end, end > i
}

// deepSeekMatcher is DeepSeek V3's third Split:
//
//	[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|
//	[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|
//	\s*[\r\n]+|\s+(?!\S)|\s+
//
// Runes no alternative starts with (digits, controls, format characters)
// are left between matches, and Isolated makes each such gap a piece.
type deepSeekMatcher struct{}

func isLetterMark(r rune) bool { return isLetter(r) || isMark(r) }

func (deepSeekMatcher) match(s string, i int) (int, bool) {
	r, n := runeAt(s, i)
	if isASCIIPunct(r) && i+n < len(s) && isASCIIAlpha(s[i+n]) {
		end := i + n
		for end < len(s) && isASCIIAlpha(s[end]) {
			end++
		}
		return end, true
	}
	if isLetterMark(r) {
		return runWhile(s, i, flLetter, isLetterMark), true
	}
	var next rune = -1
	if i+n < len(s) {
		next, _ = runeAt(s, i+n)
	}
	ps := isPunctSymbol(r)
	if r != '\r' && r != '\n' && !ps && next >= 0 && isLetterMark(next) {
		return runWhile(s, i+n, flLetter, isLetterMark), true
	}
	if ps {
		return newlineRun(s, runWhile(s, i+n, flPunctSym, isPunctSymbol)), true
	}
	if r == ' ' && next >= 0 && isPunctSymbol(next) {
		return newlineRun(s, runWhile(s, i+n+1, flPunctSym, isPunctSymbol)), true
	}
	if isSpace(r) {
		return spaceTail(s, i, r, n), true
	}
	return 0, false
}

// literalMatcher is a Split with a String pattern.
type literalMatcher string

func (m literalMatcher) match(s string, i int) (int, bool) {
	if len(m) > 0 && len(s)-i >= len(m) && s[i:i+len(m)] == string(m) {
		return i + len(m), true
	}
	return 0, false
}

// digitsMatcher is the Digits pre-tokenizer: [^\d]+|\d+, or [^\d]+|\d
// with individual_digits; \d is ASCII, as in both the engines and the
// oracle.
type digitsMatcher struct{ individual bool }

func (m digitsMatcher) match(s string, i int) (int, bool) {
	isDigit := func(c byte) bool { return '0' <= c && c <= '9' }
	end := i
	if isDigit(s[i]) {
		end++
		if !m.individual {
			for end < len(s) && isDigit(s[end]) {
				end++
			}
		}
		return end, true
	}
	for end < len(s) && !isDigit(s[end]) {
		end++
	}
	return end, true
}
