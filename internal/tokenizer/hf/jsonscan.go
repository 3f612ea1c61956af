package hf

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A small scanner for the two big parts of a tokenizer.json, model.vocab
// ({"token": id, …}) and model.merges (["a b", …] or [["a", "b"], …]),
// which encoding/json decodes several times slower than the rest of
// loading takes. members (docscan.go) delimits them in the document
// without validating them, so the scanner is strict: anything but the
// expected shape is an error naming the byte offset.

type scanner struct {
	b   []byte
	i   int
	buf []byte
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) expect(c byte) error {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != c {
		return fmt.Errorf("at byte %d: want %q", s.i, c)
	}
	s.i++
	return nil
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// str reads a JSON string. The result aliases the input when it has no
// escapes, and s.buf otherwise: use it before the next call.
func (s *scanner) str() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start := s.i
	for s.i < len(s.b) {
		switch c := s.b[s.i]; c {
		case '"':
			out := s.b[start:s.i]
			s.i++
			return out, nil
		case '\\':
			return s.strSlow(start)
		default:
			s.i++
		}
	}
	return nil, errors.New("unterminated string")
}

func (s *scanner) strSlow(start int) ([]byte, error) {
	s.buf = append(s.buf[:0], s.b[start:s.i]...)
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.buf, nil
		case c != '\\':
			s.buf = append(s.buf, c)
			s.i++
			continue
		}
		if s.i+1 >= len(s.b) {
			break
		}
		e := s.b[s.i+1]
		s.i += 2
		switch e {
		case '"', '\\', '/':
			s.buf = append(s.buf, e)
		case 'b':
			s.buf = append(s.buf, '\b')
		case 'f':
			s.buf = append(s.buf, '\f')
		case 'n':
			s.buf = append(s.buf, '\n')
		case 'r':
			s.buf = append(s.buf, '\r')
		case 't':
			s.buf = append(s.buf, '\t')
		case 'u':
			r, err := s.hex4()
			if err != nil {
				return nil, err
			}
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					s.i += 2
					lo, err := s.hex4()
					if err != nil {
						return nil, err
					}
					r2 = utf16.DecodeRune(r, lo)
				}
				r = r2
			}
			s.buf = utf8.AppendRune(s.buf, r)
		default:
			return nil, fmt.Errorf("at byte %d: bad escape \\%c", s.i, e)
		}
	}
	return nil, errors.New("unterminated string")
}

func (s *scanner) hex4() (rune, error) {
	if s.i+4 > len(s.b) {
		return 0, errors.New("short \\u escape")
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, err
	}
	s.i += 4
	return rune(v), nil
}

func (s *scanner) uint() (uint32, error) {
	s.ws()
	start := s.i
	var v uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + uint64(s.b[s.i]-'0')
		if v > 1<<32-1 {
			return 0, fmt.Errorf("at byte %d: number too large", start)
		}
		s.i++
	}
	if s.i == start {
		return 0, fmt.Errorf("at byte %d: want a token id", start)
	}
	return uint32(v), nil
}

// scanVocab calls fn for each "token": id of a vocab object.
func scanVocab(raw []byte, fn func(tok []byte, id uint32) error) error {
	s := &scanner{b: raw}
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		return nil
	}
	for {
		tok, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		id, err := s.uint()
		if err != nil {
			return err
		}
		if err := fn(tok, id); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			return nil
		default:
			return fmt.Errorf("at byte %d: want , or }", s.i)
		}
	}
}

// scanMerges calls fn for each merge, in the string form ("a b", split at
// the first space) or the pair form (["a", "b"]).
func scanMerges(raw []byte, fn func(a, b []byte) error) error {
	s := &scanner{b: raw}
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		return nil
	}
	var first []byte
	for n := 0; ; n++ {
		var a, b []byte
		switch s.peek() {
		case '"':
			m, err := s.str()
			if err != nil {
				return err
			}
			sp := -1
			for k, c := range m {
				if c == ' ' {
					sp = k
					break
				}
			}
			if sp < 0 {
				return fmt.Errorf("merge %d %q is not two tokens separated by a space", n, m)
			}
			a, b = m[:sp], m[sp+1:]
		case '[':
			s.i++
			m, err := s.str()
			if err != nil {
				return err
			}
			first = append(first[:0], m...) // s.buf is reused by the next str
			if err := s.expect(','); err != nil {
				return err
			}
			if b, err = s.str(); err != nil {
				return err
			}
			if err := s.expect(']'); err != nil {
				return err
			}
			a = first
		default:
			return fmt.Errorf("merge %d is neither \"a b\" nor [\"a\", \"b\"]", n)
		}
		if err := fn(a, b); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			return nil
		default:
			return fmt.Errorf("at byte %d: want , or ]", s.i)
		}
	}
}
