package openai

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// CheckMembers checks what encoding/json lets through but an engine reads
// differently. Go matches a JSON key to a field case-insensitively and the
// last of two matching keys wins, while vLLM and SGLang (pydantic) match
// exactly: a body with "kv_transfer_params" and "KV_TRANSFER_PARAMS" decodes
// in Go as the second and reaches the engine as the first. So a top-level key
// may appear once, in any case. A body must also be valid UTF-8, as the
// OpenAI API requires (encoding/json would quietly turn bad bytes into
// U+FFFD, so the prompt routed is not the prompt sent).
//
// owned lists fields the caller sets itself; a client's key matching one
// in any case is refused. CheckMembers only looks at a body that is
// valid JSON; it returns nil for any other, which the decoder then refuses.
func CheckMembers(body []byte, owned ...string) *FieldError {
	if !utf8.Valid(body) {
		return fieldErr("", "request body is not valid UTF-8; send UTF-8 text")
	}
	d := reader{b: body}
	if !d.consume('{') || d.consume('}') {
		return nil
	}
	// The keys seen so far: a list while short (a request has a dozen,
	// and a map with a lowered copy of each cost more than the scan), a
	// map past that, so many keys cannot make the check quadratic.
	var small [32][]byte
	keys := small[:0]
	var seen map[string]string
	for {
		d.ws()
		start := d.i
		if !d.skipString() {
			return nil
		}
		key, ok := unquoteKey(body[start:d.i])
		if !ok || !d.consume(':') || !d.skip(0) {
			return nil
		}
		for _, o := range owned {
			if bytes.EqualFold(key, []byte(o)) {
				return fieldErr(o, "%s is set by the frontend; clients may not send it (in any letter case)", o)
			}
		}
		if seen == nil {
			for _, prev := range keys {
				if bytes.EqualFold(prev, key) {
					return duplicate(string(prev), string(key))
				}
			}
			keys = append(keys, key)
			if len(keys) == len(small) {
				seen = make(map[string]string, 2*len(keys))
				for _, k := range keys {
					seen[strings.ToLower(string(k))] = string(k)
				}
			}
		} else {
			fold := strings.ToLower(string(key))
			if prev, dup := seen[fold]; dup {
				return duplicate(prev, string(key))
			}
			seen[fold] = string(key)
		}
		if d.consume(',') {
			continue
		}
		return nil
	}
}

func duplicate(prev, key string) *FieldError {
	fold := strings.ToLower(key)
	return fieldErr(fold, "field %q appears twice (as %q and %q; keys match regardless of case): send it once", fold, prev, key)
}

// unquoteKey decodes a quoted key; most have no escapes.
func unquoteKey(q []byte) ([]byte, bool) {
	if len(q) < 2 {
		return nil, false
	}
	inner := q[1 : len(q)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner, true
	}
	var s string
	if json.Unmarshal(q, &s) != nil {
		return nil, false
	}
	return []byte(s), true
}
