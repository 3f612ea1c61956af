package hf

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// addedSet finds added tokens in text: at each position the longest
// token that starts there, scanning left to right (leftmost-longest).
type addedSet struct {
	first  [256]bool          // some token starts with this byte
	byByte [256][]*addedToken // tokens by first byte, longest first
	// only is the first byte of every token when they share one (all
	// three families' start with '<'), so that next can skip to it with
	// strings.IndexByte; -1 when they do not, -2 when there are none.
	only int
}

func newAddedSet(toks []addedToken) addedSet {
	var s addedSet
	for i := range toks {
		a := &toks[i]
		c := a.Content[0]
		s.first[c] = true
		s.byByte[c] = append(s.byByte[c], a)
	}
	s.only = -2
	for c := range s.byByte {
		slices.SortStableFunc(s.byByte[c], func(a, b *addedToken) int { return len(b.Content) - len(a.Content) })
		switch {
		case len(s.byByte[c]) == 0:
		case s.only == -2:
			s.only = c
		default:
			s.only = -1
		}
	}
	return s
}

// next returns the first added token in s at or after byte i, or -1.
func (s *addedSet) next(text string, i int) (int, *addedToken) {
	if s.only == -2 {
		return -1, nil
	}
	if s.only >= 0 {
		for i < len(text) {
			j := strings.IndexByte(text[i:], byte(s.only))
			if j < 0 {
				return -1, nil
			}
			i += j
			for _, a := range s.byByte[text[i]] {
				if strings.HasPrefix(text[i:], a.Content) {
					return i, a
				}
			}
			i++
		}
		return -1, nil
	}
	for ; i < len(text); i++ {
		if !s.first[text[i]] {
			continue
		}
		for _, a := range s.byByte[text[i]] {
			if strings.HasPrefix(text[i:], a.Content) {
				return i, a
			}
		}
	}
	return -1, nil
}

// Encode returns the token ids of text as the engine computes them for a
// prompt it does not add special tokens to (a rendered chat template, or
// add_special_tokens=False). Added tokens written in the text, such as
// <|im_start|>, become their ids.
func (t *Tokenizer) Encode(text string) []uint32 {
	return t.AppendEncode(make([]uint32, 0, len(text)/4+8), text)
}

// EncodeWithSpecial is Encode plus the post-processor's tokens (Llama 3's
// <|begin_of_text|>), as for add_special_tokens=True.
func (t *Tokenizer) EncodeWithSpecial(text string) []uint32 {
	dst := make([]uint32, 0, len(text)/4+8+len(t.prefix)+len(t.suffix))
	dst = append(dst, t.prefix...)
	dst = t.AppendEncode(dst, text)
	return append(dst, t.suffix...)
}

// AppendEncode appends the ids of text to dst, like Encode. With room in
// dst, valid NFC text allocates nothing.
func (t *Tokenizer) AppendEncode(dst []uint32, text string) []uint32 {
	return t.AppendEncodeSections(dst, text, t.AppendSection)
}

// PostProcess returns the post-processor's tokens, which EncodeWithSpecial
// puts before and after the text. The slices are shared: do not modify them.
func (t *Tokenizer) PostProcess() (prefix, suffix []uint32) { return t.prefix, t.suffix }

// AppendSection appends the ids of one section of text: a span between
// the added tokens that are split out before normalization (those with
// normalized false, such as <|im_start|>), after their lstrip and rstrip.
// AppendEncode is the concatenation of its sections' ids and those added
// tokens' ids, and a section's ids depend on its text alone, so a caller
// may memoize AppendSection by the section's text and pass the memo to
// AppendEncodeSections: the ids are the same, by construction.
func (t *Tokenizer) AppendSection(dst []uint32, s string) []uint32 {
	return t.appendNormalized(dst, s)
}

// AppendEncodeSections is AppendEncode with each section encoded by
// section, which must append what AppendSection would.
func (t *Tokenizer) AppendEncodeSections(dst []uint32, text string, section func(dst []uint32, s string) []uint32) []uint32 {
	if !utf8.ValidString(text) {
		text = ToValidUTF8(text)
	}
	start := 0
	for i := 0; ; {
		at, a := t.rawAdded.next(text, i)
		if at < 0 {
			return section(dst, text[start:])
		}
		sec := text[start:at]
		if a.LStrip {
			sec = strings.TrimRightFunc(sec, isSpace)
		}
		dst = section(dst, sec)
		dst = append(dst, a.ID)
		start = at + len(a.Content)
		if a.RStrip {
			start = len(text) - len(strings.TrimLeftFunc(text[start:], isSpace))
		}
		i = start
	}
}

// appendNormalized normalizes a section between added tokens, splits out
// the added tokens that match normalized text, and encodes the rest.
func (t *Tokenizer) appendNormalized(dst []uint32, s string) []uint32 {
	if s == "" {
		return dst
	}
	if t.nfc && !isASCII(s) && norm.NFC.QuickSpanString(s) != len(s) {
		s = norm.NFC.String(s)
	}
	start := 0
	for i := 0; ; {
		at, a := t.normAdded.next(s, i)
		if at < 0 {
			return t.appendPieces(dst, 0, s[start:])
		}
		section := s[start:at]
		if a.LStrip {
			section = strings.TrimRightFunc(section, isSpace)
		}
		dst = t.appendPieces(dst, 0, section)
		dst = append(dst, a.ID)
		start = at + len(a.Content)
		if a.RStrip {
			start = len(s) - len(strings.TrimLeftFunc(s[start:], isSpace))
		}
		i = start
	}
}

// appendPieces runs pre-tokenizer stages k… over s and BPE over each
// resulting piece.
func (t *Tokenizer) appendPieces(dst []uint32, k int, s string) []uint32 {
	if s == "" {
		return dst
	}
	if k == len(t.stages) {
		return t.appendBPE(dst, s)
	}
	m := t.stages[k].m
	if f, ok := m.(finder); ok {
		for i := 0; i < len(s); {
			start, end, ok := f.find(s, i)
			if !ok {
				return t.appendPieces(dst, k+1, s[i:])
			}
			if start > i {
				dst = t.appendPieces(dst, k+1, s[i:start])
			}
			dst = t.appendPieces(dst, k+1, s[start:end])
			i = end
		}
		return dst
	}
	gap := -1
	for i := 0; i < len(s); {
		if end, ok := m.match(s, i); ok {
			if gap >= 0 {
				dst = t.appendPieces(dst, k+1, s[gap:i])
				gap = -1
			}
			dst = t.appendPieces(dst, k+1, s[i:end])
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
		dst = t.appendPieces(dst, k+1, s[gap:])
	}
	return dst
}

// finder is a matcher that can find its next match directly, which is
// faster for patterns that match rarely (DeepSeek's digits and CJK).
type finder interface {
	find(s string, i int) (start, end int, ok bool)
}

// ToValidUTF8 replaces each maximal ill-formed subsequence of s with
// U+FFFD, as the WHATWG (TextDecoder) and Python decoders do. Go's own
// []rune conversion replaces every bad byte instead, which gives more
// replacement characters, and so other tokens, for a truncated sequence.
func ToValidUTF8(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			b.WriteByte(c)
			i++
			continue
		}
		need, lo, hi := 0, byte(0x80), byte(0xBF)
		switch {
		case c >= 0xC2 && c <= 0xDF:
			need = 1
		case c >= 0xE0 && c <= 0xEF:
			need = 2
			if c == 0xE0 {
				lo = 0xA0
			} else if c == 0xED {
				hi = 0x9F
			}
		case c >= 0xF0 && c <= 0xF4:
			need = 3
			if c == 0xF0 {
				lo = 0x90
			} else if c == 0xF4 {
				hi = 0x8F
			}
		default:
			b.WriteString("\uFFFD")
			i++
			continue
		}
		j, ok := i+1, true
		for range need {
			if j >= len(s) || s[j] < lo || s[j] > hi {
				ok = false
				break
			}
			lo, hi = 0x80, 0xBF
			j++
		}
		if ok {
			b.WriteString(s[i:j])
		} else {
			b.WriteString("\uFFFD")
		}
		i = j
	}
	return b.String()
}

// Decode returns the text of ids: the bytes of each token (an added token
// decodes to its content). Ids outside the vocabulary decode to nothing.
// The result need not be valid UTF-8 when ids split a character.
func (t *Tokenizer) Decode(ids []uint32) string {
	return t.decode(ids, false)
}

// DecodeSkipSpecial is Decode without the special tokens.
func (t *Tokenizer) DecodeSkipSpecial(ids []uint32) string {
	return t.decode(ids, true)
}

func (t *Tokenizer) decode(ids []uint32, skipSpecial bool) string {
	var b strings.Builder
	for _, id := range ids {
		if int(id) < len(t.tokens) && !(skipSpecial && t.isSpec[id]) {
			b.WriteString(t.tokens[id])
		}
	}
	return b.String()
}

// Piece is the text of one token id, as Decode gives it.
func (t *Tokenizer) Piece(id uint32) string {
	if int(id) < len(t.tokens) {
		return t.tokens[id]
	}
	return ""
}

// TokenID returns the id of an added token's content or of an ordinary
// token's raw bytes.
func (t *Tokenizer) TokenID(s string) (uint32, bool) {
	for _, a := range t.added {
		if a.Content == s {
			return a.ID, true
		}
	}
	id, ok := t.vocab[s]
	return id, ok
}

// isASCII reports whether s is all ASCII (which NFC leaves as it is),
// eight bytes at a time: norm's own quick check goes byte by byte, and was
// 7% of encoding English text.
func isASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if load8(s, i)&0x8080808080808080 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
