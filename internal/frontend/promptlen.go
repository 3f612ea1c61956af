package frontend

import (
	"strings"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// countChunk is the text tokenized at a time when a prompt may exceed
// max_model_len: its tokens (at most one per byte, 256 KiB as uint32s) are
// counted and dropped, so a 3.5M-token prompt is refused without ever
// holding its 14 MB of tokens, its hash chain or its routing record.
const countChunk = 64 << 10

// maxModelLen is the smallest max_model_len among the workers serving mr,
// the longest context every one of them takes; 0 when none says.
func maxModelLen(workers []Worker, mr *modelRoute) int {
	n := 0
	for i := range workers {
		if wk := &workers[i]; mr.serves(wk) && wk.MaxModelLen > 0 && (n == 0 || wk.MaxModelLen < n) {
			n = wk.MaxModelLen
		}
	}
	return n
}

// tooLong refuses a prompt that is surely longer than maxLen tokens, before
// it is tokenized whole. A byte-level tokenizer makes at most one token per
// byte, so text of at most maxLen bytes always fits and costs nothing here.
// Longer text is tokenized in chunks cut at white space, counting only:
// a chunk boundary can change the count by a token, so each chunk is
// counted one short and the count stays a lower bound of the real one.
// The chat template's own tokens are not counted (also a lower bound).
func tooLong(tok Tokenizer, texts []string, maxLen int) (atLeast int, over bool) {
	if maxLen <= 0 {
		return 0, false
	}
	total := 0
	for _, t := range texts {
		total += len(t)
	}
	if total <= maxLen {
		return 0, false
	}
	n := 0
	for _, t := range texts {
		for len(t) > 0 {
			cut := len(t)
			if cut > countChunk {
				cut = countChunk
				if i := strings.LastIndexAny(t[:cut], " \n\t"); i > countChunk/2 {
					cut = i
				}
			}
			n += max(len(tok.Encode(t[:cut]))-1, 0)
			t = t[cut:]
			if n > maxLen {
				return n, true
			}
		}
	}
	return n, false
}

// contextError is the refusal of a prompt longer than max_model_len, in
// the words vLLM uses for it.
func contextError(param, model string, atLeast, maxLen int) *apiError {
	e := badRequest(param, "frontend: this model's maximum context length is %d tokens, but the prompt has at least %d; shorten it (model %q)", maxLen, atLeast, model)
	e.code = "context_length_exceeded"
	return e
}

// messageTexts are the text contents of msgs.
func messageTexts(msgs []openai.Message) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, m.Content)
	}
	return out
}
