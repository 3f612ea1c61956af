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
		return errNotUTF8()
	}
	d := reader{b: body}
	if !d.consume('{') || d.consume('}') {
		return nil
	}
	kc := keyCheck{owned: owned}
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
		if fe := kc.add(key); fe != nil {
			return fe
		}
		if d.consume(',') {
			continue
		}
		return nil
	}
}

// keyCheck holds the top-level keys of a body seen so far and refuses a
// second spelling of one, or one of the owned keys. Keys are kept in a
// list while few (a request has a dozen, and a map with a lowered copy of
// each cost more than the scan), in a map past that, so many keys cannot
// make the check quadratic.
type keyCheck struct {
	owned []string
	small [32][]byte
	n     int
	seen  map[string]string
	err   *FieldError // the first refusal, for a caller that goes on
}

// add checks key, which must stay valid as long as the keyCheck is used.
func (kc *keyCheck) add(key []byte) *FieldError {
	for _, o := range kc.owned {
		if bytes.EqualFold(key, []byte(o)) {
			return fieldErr(o, "%s is set by the frontend; clients may not send it (in any letter case)", o)
		}
	}
	if kc.seen == nil {
		for _, prev := range kc.small[:kc.n] {
			if bytes.EqualFold(prev, key) {
				return duplicate(string(prev), string(key))
			}
		}
		kc.small[kc.n] = key
		if kc.n++; kc.n == len(kc.small) {
			kc.seen = make(map[string]string, 2*kc.n)
			for _, k := range kc.small {
				kc.seen[strings.ToLower(string(k))] = string(k)
			}
		}
		return nil
	}
	fold := strings.ToLower(string(key))
	if prev, dup := kc.seen[fold]; dup {
		return duplicate(prev, string(key))
	}
	kc.seen[fold] = string(key)
	return nil
}

func errNotUTF8() *FieldError {
	return fieldErr("", "request body is not valid UTF-8; send UTF-8 text")
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
