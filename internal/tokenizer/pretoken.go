package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer splits text into pieces exactly as cl100k_base's
// pattern does under tiktoken-go's regexp2 engine:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// regexp2 matches on runes with \s = unicode.IsSpace, \p{L} = unicode.L,
// \p{N} = unicode.N and (?i) comparing unicode.ToLower of the input, so
// the scanner uses the same predicates. Every rune falls in exactly one
// of four classes, and every alternative consumes at least one rune, so
// the matches tile the text and the scanner only needs "where does the
// piece starting here end".
//
// A hand-written scanner instead of a regexp because the pattern's
// lookahead rules out Go's RE2 engine, and a backtracking matcher over a
// []rune copy of the text is what made tiktoken-go slow.

type class uint8

const (
	classOther class = iota // none of the below: punctuation, symbols, marks, controls
	classLetter
	classNumber
	classSpace
)

// asciiClass classifies the ASCII runes without a unicode table lookup.
var asciiClass = func() (t [utf8.RuneSelf]class) {
	for r := range rune(utf8.RuneSelf) {
		t[r] = classOfSlow(r)
	}
	return t
}()

func classOfSlow(r rune) class {
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// runeAt decodes the rune at s[i] (i < len(s)) with its class and width.
func runeAt(s string, i int) (rune, class, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return r, classOfSlow(r), n
}

// classAt is the class of the rune at s[i]; ok is false at the end of s.
func classAt(s string, i int) (class, bool) {
	if i >= len(s) {
		return classOther, false
	}
	_, c, _ := runeAt(s, i)
	return c, true
}

// lowerIs reports whether unicode.ToLower(r) == want, for an ASCII
// lower-case want.
func lowerIs(r, want rune) bool {
	if r < utf8.RuneSelf {
		return r|0x20 == want && r >= 'A'
	}
	return unicode.ToLower(r) == want
}

// nextPiece returns the end of the piece that starts at s[i], i < len(s).
// s must be valid UTF-8.
func nextPiece(s string, i int) int {
	r, c, n := runeAt(s, i)
	if r == '\'' {
		if end := contraction(s, i+1); end > 0 {
			return end
		}
	}
	switch c {
	case classLetter:
		return letterRun(s, i+n)
	case classNumber:
		end := i + n
		for k := 1; k < 3 && end < len(s); k++ {
			_, c2, n2 := runeAt(s, end)
			if c2 != classNumber {
				break
			}
			end += n2
		}
		return end
	case classOther:
		// [^\r\n\p{L}\p{N}]?\p{L}+ with the optional rune taken.
		if next, ok := classAt(s, i+n); ok && next == classLetter {
			return letterRun(s, i+n)
		}
		return newlineRun(s, otherRun(s, i+n))
	}
	// classSpace.
	if r != '\r' && r != '\n' {
		if next, ok := classAt(s, i+n); ok {
			if next == classLetter {
				return letterRun(s, i+n)
			}
			if r == ' ' && next == classOther {
				return newlineRun(s, otherRun(s, i+n))
			}
		}
	}
	// The whitespace run s[i:end] and where its last rune starts.
	end, last, afterNewline := i+n, i, -1
	if r == '\r' || r == '\n' {
		afterNewline = end
	}
	for end < len(s) {
		r2, c2, n2 := runeAt(s, end)
		if c2 != classSpace {
			break
		}
		last = end
		end += n2
		if r2 == '\r' || r2 == '\n' {
			afterNewline = end
		}
	}
	switch {
	case afterNewline >= 0: // \s*[\r\n]+ backtracks to the last newline.
		return afterNewline
	case end == len(s): // \s+(?!\S) at the end of text.
		return end
	case last > i: // \s+(?!\S) gives its last rune to the next piece.
		return last
	}
	return end // \s+ of a single rune before a non-space.
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) after the apostrophe
// at s[i-1], returning the end or 0.
func contraction(s string, i int) int {
	if i >= len(s) {
		return 0
	}
	r, _, n := runeAt(s, i)
	switch {
	case lowerIs(r, 's'), lowerIs(r, 't'), lowerIs(r, 'm'), lowerIs(r, 'd'):
		return i + n
	case lowerIs(r, 'r'), lowerIs(r, 'v'):
		if i+n < len(s) {
			if r2, _, n2 := runeAt(s, i+n); lowerIs(r2, 'e') {
				return i + n + n2
			}
		}
	case lowerIs(r, 'l'):
		if i+n < len(s) {
			if r2, _, n2 := runeAt(s, i+n); lowerIs(r2, 'l') {
				return i + n + n2
			}
		}
	}
	return 0
}

// letterRun returns the end of the run of letters starting at s[i].
func letterRun(s string, i int) int { return classRun(s, i, classLetter) }

// otherRun returns the end of the run of classOther runes starting at s[i].
func otherRun(s string, i int) int { return classRun(s, i, classOther) }

// classRun returns the end of the run of runes of class want starting at
// s[i]. ASCII is classified in the loop: runeAt, which holds the UTF-8
// path, is not inlined, and a call per byte of English text showed.
func classRun(s string, i int, want class) int {
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if asciiClass[b] != want {
				break
			}
			i++
			continue
		}
		_, c, n := runeAt(s, i)
		if c != want {
			break
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
