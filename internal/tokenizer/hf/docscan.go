package hf

import (
	"bytes"
	"errors"
	"fmt"
)

// member is one "key": value of a JSON object; val is the value's bytes,
// aliasing the input.
type member struct {
	key string
	val []byte
}

// members splits a JSON object into its members without decoding the
// values, so that Parse hands model.vocab and model.merges (most of a
// tokenizer.json's megabytes) to scanVocab and scanMerges in place and
// decodes only the small parts with encoding/json: validating and
// copying the whole document with encoding/json was a quarter of loading
// Llama 3.1's file (pprof). Values are delimited, not validated: each one
// used is decoded strictly afterwards; a value under a key nobody reads is
// only checked for balanced brackets and closed strings.
func members(b []byte) ([]member, error) {
	s := &scanner{b: b}
	if err := s.expect('{'); err != nil {
		return nil, err
	}
	var out []member
	if s.peek() == '}' {
		s.i++
	} else {
		for {
			k, err := s.str()
			if err != nil {
				return nil, err
			}
			key := string(k)
			if err := s.expect(':'); err != nil {
				return nil, err
			}
			s.ws()
			start := s.i
			if err := s.skip(); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			out = append(out, member{key: key, val: b[start:s.i]})
			c := s.peek()
			s.i++
			if c == '}' {
				break
			}
			if c != ',' {
				return nil, fmt.Errorf("at byte %d: want , or }", s.i-1)
			}
		}
	}
	if s.peek() != 0 {
		return nil, fmt.Errorf("at byte %d: data after the top-level object", s.i)
	}
	return out, nil
}

var errEnd = errors.New("unexpected end of input")

// skip moves past one JSON value.
func (s *scanner) skip() error {
	s.ws()
	if s.i >= len(s.b) {
		return errEnd
	}
	switch s.b[s.i] {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if err := s.skipString(); err != nil {
					return err
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return nil
				}
			}
			s.i++
		}
		return errEnd
	case '}', ']', ',', ':':
		return fmt.Errorf("at byte %d: want a value", s.i)
	}
	start := s.i // a number, true, false or null
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return nil
		}
		s.i++
	}
	if s.i == start {
		return errEnd
	}
	return nil
}

// skipString moves past the string starting at s.b[s.i].
func (s *scanner) skipString() error {
	s.i++
	for {
		j := bytes.IndexByte(s.b[s.i:], '"')
		if j < 0 {
			s.i = len(s.b)
			return errors.New("unterminated string")
		}
		s.i += j + 1
		// The quote is escaped if an odd number of backslashes precede it.
		n := 0
		for k := s.i - 2; k >= 0 && s.b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return nil
		}
	}
}
