package openai

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// DecodeRequest decodes a completion or chat request body into req with
// the result and the errors of json.Unmarshal(body, req), at a fraction of
// its cost for a long prompt.
//
// encoding/json reads a 1,500-word message four times over (validating
// the body, skipping the messages array, validating the message again in
// Message.UnmarshalJSON, then decoding it), which took ~100 µs, as much as
// tokenizing it. Here the messages and a string prompt are validated and
// decoded in one pass, and only the other, small, members go through
// encoding/json. Anything out of the ordinary (a syntax or type error, a
// key written with escapes or twice, nesting past maxDepth) falls back to
// json.Unmarshal of the whole body, which then decides; FuzzDecodeRequest
// holds the two to the same answers.
func DecodeRequest(body []byte, req *CompletionRequest) error {
	if decodeFast(body, req, nil) {
		return nil
	}
	*req = CompletionRequest{}
	return json.Unmarshal(body, req)
}

// DecodeChecked is DecodeRequest followed, when it succeeds, by
// CheckMembers(body, owned...), with the answers of the two but one walk
// over the body where the fast path takes it: the second walk had cost
// as much as decoding a long chat.
func DecodeChecked(body []byte, req *CompletionRequest, owned ...string) (*FieldError, error) {
	kc := keyCheck{owned: owned}
	if decodeFast(body, req, &kc) {
		if !utf8.Valid(body) {
			return errNotUTF8(), nil
		}
		return kc.err, nil
	}
	*req = CompletionRequest{}
	if err := json.Unmarshal(body, req); err != nil {
		return nil, err
	}
	return CheckMembers(body, owned...), nil
}

// maxDepth bounds the nesting the fast path follows; deeper bodies go to
// encoding/json (which allows 10,000 levels).
const maxDepth = 200

// reader walks a JSON document. Its methods return false on anything the
// fast path does not take, valid or not.
type reader struct {
	b []byte
	i int
}

// decodeFast is DecodeRequest's one pass; it reports false for a body it
// leaves to encoding/json. With kc, it also checks each top-level key and
// keeps the first refusal in kc.err.
func decodeFast(body []byte, req *CompletionRequest, kc *keyCheck) bool {
	d := reader{b: body}
	if !d.consume('{') {
		return false
	}
	rest := make([]byte, 1, 256)
	rest[0] = '{'
	var msgs []Message
	var prompt *Prompt
	var sc scalars
	sawMessages, sawPrompt := false, false
	if !d.consume('}') {
		for {
			memberStart := d.ws()
			key, ok := d.key()
			if !ok || !d.consume(':') {
				return false
			}
			if kc != nil && kc.err == nil {
				kc.err = kc.add(key)
			}
			d.ws()
			switch {
			case keyIs(key, "messages"):
				if sawMessages {
					return false
				}
				sawMessages = true
				if msgs, ok = d.messages(); !ok {
					return false
				}
			case keyIs(key, "prompt") && d.peek() == '"':
				if sawPrompt {
					return false
				}
				sawPrompt = true
				s, ok := d.str()
				if !ok {
					return false
				}
				prompt = &Prompt{Text: s}
			case sc.take(&d, key):
				if sc.failed {
					return false
				}
			default:
				if keyIs(key, "prompt") {
					if sawPrompt {
						return false
					}
					sawPrompt = true
				}
				if !d.skip(0) {
					return false
				}
				if len(rest) > 1 {
					rest = append(rest, ',')
				}
				rest = append(rest, body[memberStart:d.i]...)
			}
			if d.consume(',') {
				continue
			}
			if d.consume('}') {
				break
			}
			return false
		}
	}
	if d.ws(); d.i != len(body) {
		return false
	}
	if len(rest) > 1 {
		// Members the fast path does not decode itself: few and small.
		rest = append(rest, '}')
		if json.Unmarshal(rest, req) != nil {
			return false
		}
	}
	sc.set(req)
	if sawMessages {
		req.Messages = msgs
	}
	if prompt != nil {
		req.Prompt = prompt
	}
	return true
}

// messages reads a messages array (or null).
func (d *reader) messages() ([]Message, bool) {
	if d.literal("null") {
		return nil, true
	}
	if !d.consume('[') {
		return nil, false
	}
	msgs := make([]Message, 0, 4)
	if d.consume(']') {
		return msgs, true
	}
	for {
		m, ok := d.message()
		if !ok {
			return nil, false
		}
		msgs = append(msgs, m)
		if d.consume(',') {
			continue
		}
		return msgs, d.consume(']')
	}
}

// message reads one message object as Message.UnmarshalJSON does: role
// and content, other members validated and ignored.
func (d *reader) message() (Message, bool) {
	var m Message
	if d.ws(); !d.consume('{') {
		return m, false
	}
	if d.consume('}') {
		m.NoContent = true
		return m, true
	}
	sawRole, sawContent := false, false
	for {
		d.ws()
		key, ok := d.key()
		if !ok || !d.consume(':') {
			return m, false
		}
		d.ws()
		switch {
		case keyIs(key, "role"):
			if sawRole {
				return m, false
			}
			sawRole = true
			if !d.literal("null") {
				if m.Role, ok = d.str(); !ok {
					return m, false
				}
			}
		case keyIs(key, "content"):
			if sawContent {
				return m, false
			}
			sawContent = true
			switch d.peek() {
			case 'n':
				if !d.literal("null") {
					return m, false
				}
				m.NoContent = true
			case '"':
				if m.Content, ok = d.str(); !ok {
					return m, false
				}
			case '[':
				// Content parts: rare, and short; encoding/json and the
				// parts rules of Message.UnmarshalJSON.
				start := d.i
				if !d.skip(1) {
					return m, false
				}
				var parts any
				if json.Unmarshal(d.b[start:d.i], &parts) != nil || m.setContent(parts, nil) != nil {
					return m, false
				}
			default:
				return m, false
			}
		default:
			if !d.skip(1) {
				return m, false
			}
		}
		if d.consume(',') {
			continue
		}
		m.NoContent = m.NoContent || !sawContent
		return m, d.consume('}')
	}
}

// ws skips white space and returns the position after it.
func (d *reader) ws() int {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return d.i
		}
	}
	return d.i
}

// consume skips white space and c, if c is next.
func (d *reader) consume(c byte) bool {
	if d.ws(); d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *reader) peek() byte {
	if d.ws(); d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *reader) literal(lit string) bool {
	if d.ws(); len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
		d.i += len(lit)
		return true
	}
	return false
}

// key reads an object key written without escapes. It returns the key's
// bytes in the document: keys are only compared, and a string per key was
// most of the fast path's allocations.
func (d *reader) key() ([]byte, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			k := d.b[d.i+1 : j]
			d.i = j + 1
			return k, true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// keyIs reports whether key matches name as encoding/json matches keys to
// fields: regardless of case.
func keyIs(key []byte, name string) bool {
	return bytes.EqualFold(key, []byte(name))
}

// str reads a string, decoded as encoding/json decodes it: escapes
// resolved, a lone or broken surrogate escape and each byte of invalid
// UTF-8 replaced by U+FFFD.
func (d *reader) str() (string, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return "", false
	}
	start := d.i + 1
	for j := plainRun(d.b, start); j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			d.i = j + 1
			return string(d.b[start:j]), true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return d.strSlow(start, j)
		}
	}
	return "", false
}

// plainRun returns the index of the first 8-byte word at or after i that
// may hold a byte ending a plain run of string text (a quote, a
// backslash, a control or a non-ASCII byte), eight bytes at a time: a
// prompt is mostly such runs, and a test per byte was most of decoding it.
func plainRun(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^('"'*ones), x^('\\'*ones)
		// Each term is nonzero exactly when some byte is: non-ASCII,
		// below 0x20, a quote, a backslash.
		if (x|(x-0x20*ones)|(q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
			return i
		}
	}
	return i
}

// strSlow is str from j on, where the first escape, control or non-ASCII
// byte is. The string is built in one buffer the size of its raw text
// (found first by stringEnd from j): grown by appends, a long prompt with
// a newline per line had cost more in allocation than in decoding.
func (d *reader) strSlow(start, j int) (string, bool) {
	end := stringEnd(d.b, j)
	if end < 0 {
		return "", false
	}
	var out strings.Builder
	out.Grow(end - start)
	out.Write(d.b[start:j])
	for j < len(d.b) {
		c := d.b[j]
		switch {
		case c == '"':
			d.i = j + 1
			return out.String(), true
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(d.b[j:])
			if r == utf8.RuneError && n == 1 {
				out.WriteRune(utf8.RuneError)
			} else {
				out.Write(d.b[j : j+n])
			}
			j += n
		case c != '\\':
			k := plainRun(d.b, j+1)
			out.Write(d.b[j:k])
			j = k
		default:
			if j+1 >= len(d.b) {
				return "", false
			}
			switch e := d.b[j+1]; e {
			case '"', '\\', '/':
				out.WriteByte(e)
			case 'b':
				out.WriteByte('\b')
			case 'f':
				out.WriteByte('\f')
			case 'n':
				out.WriteByte('\n')
			case 'r':
				out.WriteByte('\r')
			case 't':
				out.WriteByte('\t')
			case 'u':
				r, ok := hex4(d.b, j+2)
				if !ok {
					return "", false
				}
				j += 6
				if utf16.IsSurrogate(r) {
					// A pair decodes as one rune; a lone half is U+FFFD
					// and the escape after it is read on its own.
					r2, ok := hex4(d.b, j+2)
					if ok && d.b[j] == '\\' && d.b[j+1] == 'u' {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							out.WriteRune(dec)
							j += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				out.WriteRune(r)
				continue
			default:
				return "", false
			}
			j += 2
		}
	}
	return "", false
}

// hex4 reads the four hex digits at b[i:], if they are there.
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// skip reads past one value of any kind, checking its syntax.
func (d *reader) skip(depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch d.peek() {
	case '"':
		return d.skipString()
	case '{':
		d.i++
		if d.consume('}') {
			return true
		}
		for {
			d.ws()
			if !d.skipString() || !d.consume(':') || !d.skip(depth+1) {
				return false
			}
			if d.consume(',') {
				continue
			}
			return d.consume('}')
		}
	case '[':
		d.i++
		if d.consume(']') {
			return true
		}
		for {
			if !d.skip(depth + 1) {
				return false
			}
			if d.consume(',') {
				continue
			}
			return d.consume(']')
		}
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	default:
		return d.number()
	}
}

// skipString reads past a string, checking its escapes.
func (d *reader) skipString() bool {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return false
	}
	e := stringEnd(d.b, d.i+1)
	if e < 0 {
		return false
	}
	d.i = e + 1
	return true
}

// stringEnd returns the index of the quote that ends the string whose
// text continues at j, checking its escapes; -1 if the string is
// malformed or does not end.
func stringEnd(b []byte, j int) int {
	for j = plainRun(b, j); j < len(b); {
		switch c := b[j]; {
		case c == '"':
			return j
		case c < 0x20:
			return -1
		case c == '\\':
			if j+1 >= len(b) {
				return -1
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if _, ok := hex4(b, j+2); !ok {
					return -1
				}
				j += 6
			default:
				return -1
			}
		default:
			j = plainRun(b, j+1)
		}
	}
	return -1
}

// number reads past a number in JSON's grammar:
// -? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?
func (d *reader) number() bool {
	b, i := d.b, d.i
	digits := func() bool {
		s := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > s
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	d.i = i
	return true
}

// scalars are the members nearly every request carries besides its
// messages, decoded in place: with them, a typical chat needs no
// encoding/json at all (which had cost about 5% of the frontend's CPU per
// short chat, reflecting over CompletionRequest's 50 fields for four).
type scalars struct {
	model                    string
	stream, includeUsage     bool
	maxTokens, maxCompletion int
	seen                     uint8
	failed                   bool
}

const (
	seenModel uint8 = 1 << iota
	seenStream
	seenOptions
	seenMax
	seenMaxCompletion
)

// take decodes the member named key when it is one of the scalars,
// reporting whether key is one. It sets failed when the member is not in
// its usual form (null, a number with a fraction, a second stream_options
// key), is malformed, or comes twice (encoding/json resolves that by
// order): encoding/json then decides the whole body.
func (sc *scalars) take(d *reader, key []byte) bool {
	mark := func(bit uint8) {
		if sc.seen&bit != 0 {
			sc.failed = true
		}
		sc.seen |= bit
	}
	c := d.peek()
	number := c == '-' || '0' <= c && c <= '9'
	var ok bool
	switch {
	case keyIs(key, "model"):
		mark(seenModel)
		if c == '"' {
			sc.model, ok = d.str()
		}
	case keyIs(key, "stream"):
		mark(seenStream)
		if c == 't' || c == 'f' {
			sc.stream, ok = d.boolean()
		}
	case keyIs(key, "stream_options"):
		mark(seenOptions)
		if c == '{' {
			d.i++
			d.ws()
			var k []byte
			if k, ok = d.key(); ok && keyIs(k, "include_usage") && d.consume(':') {
				sc.includeUsage, ok = d.boolean()
				ok = ok && d.consume('}')
			} else {
				ok = false
			}
		}
	case keyIs(key, "max_tokens"):
		mark(seenMax)
		if number {
			sc.maxTokens, ok = d.integer()
		}
	case keyIs(key, "max_completion_tokens"):
		mark(seenMaxCompletion)
		if number {
			sc.maxCompletion, ok = d.integer()
		}
	default:
		return false
	}
	sc.failed = sc.failed || !ok
	return true
}

// set stores the decoded scalars in req.
func (sc *scalars) set(req *CompletionRequest) {
	if sc.seen&seenModel != 0 {
		req.Model = sc.model
	}
	if sc.seen&seenStream != 0 {
		req.Stream = sc.stream
	}
	if sc.seen&seenOptions != 0 {
		req.StreamOptions = &StreamOptions{IncludeUsage: sc.includeUsage}
	}
	if sc.seen&seenMax != 0 {
		n := sc.maxTokens
		req.MaxTokens = &n
	}
	if sc.seen&seenMaxCompletion != 0 {
		n := sc.maxCompletion
		req.MaxCompletion = &n
	}
}

// boolean reads true or false.
func (d *reader) boolean() (v, ok bool) {
	switch {
	case d.literal("true"):
		return true, true
	case d.literal("false"):
		return false, true
	}
	return false, false
}

// integer reads a number written as an integer that fits an int, as
// encoding/json decodes one into an int; anything else (a fraction, an
// exponent, an overflow) is not taken.
func (d *reader) integer() (int, bool) {
	start := d.i
	if !d.number() {
		return 0, false
	}
	lit := d.b[start:d.i]
	if bytes.ContainsAny(lit, ".eE") {
		return 0, false
	}
	n, err := strconv.ParseInt(string(lit), 10, strconv.IntSize)
	return int(n), err == nil
}
