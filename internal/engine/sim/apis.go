package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"sync"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// maxStoredResponses bounds the conversations a worker keeps for
// previous_response_id; the oldest are forgotten first.
const maxStoredResponses = 4096

// readBody reads a request body within MaxBodyBytes.
func readBody(rw http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "", fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes)}
		}
		return nil, badRequest("", "reading request body: %v", err)
	}
	return body, nil
}

func (w *Worker) requestID(rw http.ResponseWriter, r *http.Request) string {
	reqID := r.Header.Get("x-request-id")
	if reqID == "" {
		reqID = fmt.Sprintf("%s-%d", w.cfg.ID, w.reqID.Add(1))
	}
	rw.Header().Set("x-request-id", reqID)
	return reqID
}

// serveMessages serves POST /v1/messages, Anthropic's Messages API: the
// request is generated as the chat completion it renders into, and the
// answer written in the Messages API's shape.
func (w *Worker) serveMessages(rw http.ResponseWriter, r *http.Request) {
	reqID := w.requestID(rw, r)
	body, aerr := readBody(rw, r)
	if aerr != nil {
		openai.WriteAnthropicError(rw, aerr.status, aerr.msg)
		return
	}
	req, fe := openai.DecodeAnthropic(body)
	if fe != nil {
		openai.WriteAnthropicError(rw, http.StatusBadRequest, fe.Msg)
		return
	}
	if _, ok := w.resolveModel(req.Model); !ok {
		openai.WriteAnthropicError(rw, http.StatusNotFound, fmt.Sprintf("model %q does not exist; this worker serves %q", req.Model, w.cfg.Model))
		return
	}
	chat := req.Chat()
	creq := chat.Completion()
	prompt, _ := w.tok.EncodeChat(creq.Messages, tokenizer.DefaultChat)
	tr := openai.NewAnthropicTranslator(rw, req, "msg_"+reqID, len(prompt))
	w.generate(tr, r, &creq, reqID, true)
	tr.Finish()
}

// serveResponses serves POST /v1/responses, OpenAI's Responses API, as
// serveMessages does the Messages API. A stored response (store is not
// false) keeps its conversation here for previous_response_id.
func (w *Worker) serveResponses(rw http.ResponseWriter, r *http.Request) {
	reqID := w.requestID(rw, r)
	body, aerr := readBody(rw, r)
	if aerr != nil {
		writeErr(rw, aerr)
		return
	}
	req, fe := openai.DecodeResponses(body)
	if fe != nil {
		writeErr(rw, badRequest(fe.Param, "%s", fe.Msg))
		return
	}
	if _, ok := w.resolveModel(req.Model); !ok {
		writeErr(rw, &apiError{http.StatusNotFound, openai.TypeNotFound, "model", fmt.Sprintf("model %q does not exist; this worker serves %q", req.Model, w.cfg.Model)})
		return
	}
	var prev []openai.ChatTurn
	if id := req.PreviousResponseID; id != "" {
		var ok bool
		if prev, ok = w.stored.get(id); !ok {
			writeErr(rw, badRequest("previous_response_id", "previous response with id %q not found on worker %s", id, w.cfg.ID))
			return
		}
	}
	chat := req.Chat(prev)
	creq := chat.Completion()
	tr := openai.NewResponsesTranslator(rw, req, "resp_"+reqID)
	if req.Store == nil || *req.Store {
		convo := chat.Messages
		if len(convo) > 0 && req.Instructions != nil && *req.Instructions != "" {
			convo = convo[1:] // instructions do not carry over to the next response
		}
		tr.OnResponse = func(o *openai.ResponseObject) {
			if o.Status == "completed" || o.Status == "incomplete" {
				w.stored.put(o.ID, append(convo[:len(convo):len(convo)], openai.OutputTurn(o)))
			}
		}
	}
	w.generate(tr, r, &creq, reqID, true)
	tr.Finish()
}

// conversations are stored responses' transcripts by response id,
// bounded: the oldest are forgotten first. Safe for concurrent use.
type conversations struct {
	mu    sync.Mutex // guards all below
	cap   int
	byID  map[string][]openai.ChatTurn
	order []string // ring, insertion order
	next  int
}

func newConversations(capacity int) *conversations {
	return &conversations{cap: capacity, byID: make(map[string][]openai.ChatTurn)}
}

func (c *conversations) put(id string, turns []openai.ChatTurn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[id]; !ok {
		if len(c.order) < c.cap {
			c.order = append(c.order, id)
		} else {
			delete(c.byID, c.order[c.next])
			c.order[c.next] = id
			c.next = (c.next + 1) % c.cap
		}
	}
	c.byID[id] = turns
}

func (c *conversations) get(id string) ([]openai.ChatTurn, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.byID[id]
	return t, ok
}

// embeddingDims is the size of the simulated embedding unless the request
// asks for fewer dimensions (the size of small sentence encoders).
const embeddingDims = 384

// serveEmbeddings serves POST /v1/embeddings with a deterministic unit
// vector per input, derived from its tokens: equal inputs embed equally,
// so clients can be tested end to end. It costs no engine time.
func (w *Worker) serveEmbeddings(rw http.ResponseWriter, r *http.Request) {
	w.requestID(rw, r)
	body, aerr := readBody(rw, r)
	if aerr != nil {
		writeErr(rw, aerr)
		return
	}
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
		Dimensions     *int            `json:"dimensions"`
		User           string          `json:"user"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(rw, badRequest("", "malformed JSON body: %v", err))
		return
	}
	if _, ok := w.resolveModel(req.Model); !ok {
		writeErr(rw, &apiError{http.StatusNotFound, openai.TypeNotFound, "model", fmt.Sprintf("model %q does not exist; this worker serves %q", req.Model, w.cfg.Model)})
		return
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" {
		writeErr(rw, badRequest("encoding_format", "encoding_format %q is not supported; use \"float\"", req.EncodingFormat))
		return
	}
	dims := embeddingDims
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > embeddingDims {
			writeErr(rw, badRequest("dimensions", "dimensions must be in 1..%d, got %d", embeddingDims, *req.Dimensions))
			return
		}
		dims = *req.Dimensions
	}
	inputs, aerr := w.embeddingInputs(req.Input)
	if aerr != nil {
		writeErr(rw, aerr)
		return
	}
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float64 `json:"embedding"`
	}
	data := make([]item, len(inputs))
	total := 0
	for i, toks := range inputs {
		total += len(toks)
		data[i] = item{Object: "embedding", Index: i, Embedding: embed(toks, dims)}
	}
	openai.WriteJSON(rw, map[string]any{"object": "list", "data": data, "model": w.cfg.Model,
		"usage": map[string]int{"prompt_tokens": total, "total_tokens": total}})
}

// embeddingInputs reads input: a string, an array of strings, an array
// of token ids or an array of such arrays.
func (w *Worker) embeddingInputs(in json.RawMessage) ([][]uint32, *apiError) {
	var s string
	if json.Unmarshal(in, &s) == nil {
		return [][]uint32{w.tok.Encode(s)}, nil
	}
	var ss []string
	if json.Unmarshal(in, &ss) == nil && len(ss) > 0 {
		out := make([][]uint32, len(ss))
		for i, s := range ss {
			out[i] = w.tok.Encode(s)
		}
		return out, nil
	}
	var toks []uint32
	if json.Unmarshal(in, &toks) == nil && len(toks) > 0 {
		return [][]uint32{toks}, nil
	}
	var lists [][]uint32
	if json.Unmarshal(in, &lists) == nil && len(lists) > 0 {
		return lists, nil
	}
	return nil, badRequest("input", "input must be a string, an array of strings, or token ids, and not empty")
}

// embed is a deterministic unit vector of dims for toks.
func embed(toks []uint32, dims int) []float64 {
	h := fnv.New64a()
	var b [4]byte
	for _, t := range toks {
		b[0], b[1], b[2], b[3] = byte(t), byte(t>>8), byte(t>>16), byte(t>>24)
		_, _ = h.Write(b[:])
	}
	x := h.Sum64() | 1
	v := make([]float64, dims)
	norm := 0.0
	for i := range v {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v[i] = float64(int64(x>>11)-(1<<52)) / (1 << 52)
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] /= norm
	}
	return v
}

// serveDetokenize serves POST /detokenize as vLLM does: {"tokens": [...]}
// to {"prompt": text}.
func (w *Worker) serveDetokenize(rw http.ResponseWriter, r *http.Request) {
	body, aerr := readBody(rw, r)
	if aerr != nil {
		writeErr(rw, aerr)
		return
	}
	var req struct {
		Model  string   `json:"model"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(rw, badRequest("tokens", "detokenize wants {\"tokens\": [ids]}: %v", err))
		return
	}
	if _, ok := w.resolveModel(req.Model); !ok {
		writeErr(rw, &apiError{http.StatusNotFound, openai.TypeNotFound, "model", "model " + req.Model + " does not exist; this worker serves " + w.cfg.Model})
		return
	}
	for _, t := range req.Tokens {
		if int(t) >= w.tok.VocabSize() {
			writeErr(rw, badRequest("tokens", "token id %d is outside the vocabulary (size %d)", t, w.tok.VocabSize()))
			return
		}
	}
	openai.WriteJSON(rw, map[string]string{"prompt": w.tok.Decode(req.Tokens)})
}
