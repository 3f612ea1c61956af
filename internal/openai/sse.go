package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// SSEWriter writes server-sent events of the OpenAI stream format and flushes
// after each one. It is not safe for concurrent use.
type SSEWriter struct {
	w       http.ResponseWriter
	flusher http.Flusher
	buf     []byte
}

// NewSSEWriter sets the streaming headers and returns a writer. Headers must
// not have been written yet.
func NewSSEWriter(w http.ResponseWriter) *SSEWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	f, _ := w.(http.Flusher)
	return &SSEWriter{w: w, flusher: f}
}

// Event marshals v and writes it as one "data:" event.
func (s *SSEWriter) Event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.Raw(b)
}

// Raw writes an already-encoded JSON payload as one "data:" event.
func (s *SSEWriter) Raw(payload []byte) error {
	s.buf = append(s.buf[:0], "data: "...)
	s.buf = append(s.buf, payload...)
	s.buf = append(s.buf, '\n', '\n')
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	if s.flusher != nil {
		s.flusher.Flush()
	}
	return nil
}

// Done writes the terminating "data: [DONE]" event.
func (s *SSEWriter) Done() error { return s.Raw(doneMarker) }

// Error writes an in-stream error event followed by [DONE].
func (s *SSEWriter) Error(status int, typ, msg string) error {
	if err := s.Event(NewError(status, typ, "", msg)); err != nil {
		return err
	}
	return s.Done()
}

var doneMarker = []byte("[DONE]")

// ErrStreamDone is returned by SSEReader.Next after the [DONE] event.
var ErrStreamDone = errors.New("openai: stream done")

// SSEReader reads "data:" events from an OpenAI stream. The returned slice is
// valid until the next call. It is not safe for concurrent use.
type SSEReader struct {
	r *bufio.Reader
}

// NewSSEReader wraps r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the payload of the next data event, ErrStreamDone after
// [DONE], or io.ErrUnexpectedEOF if the stream ends without [DONE].
func (s *SSEReader) Next() ([]byte, error) {
	for {
		line, err := s.r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, bufio.ErrBufferFull) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue // blank separators, comments, other fields
		}
		payload := bytes.TrimSpace(line[len("data:"):])
		if bytes.Equal(payload, doneMarker) {
			return nil, ErrStreamDone
		}
		return payload, nil
	}
}
