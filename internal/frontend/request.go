package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// endpoint is one of the two completion endpoints.
type endpoint struct {
	name string // metrics label
	path string // the worker path, the same as the client's
	chat bool
}

var (
	endpointChat        = endpoint{name: "chat", path: "/v1/chat/completions", chat: true}
	endpointCompletions = endpoint{name: "completions", path: "/v1/completions"}
)

// apiError is an error on its way to the client as an OpenAI envelope.
type apiError struct {
	status int
	typ    string
	param  string
	msg    string
	kind   string // switchyard_errors_total label
	// counted: the failure was counted in switchyard_errors_total where it
	// happened (a failed upstream attempt), so fail must not count it again.
	counted    bool
	retryAfter string // Retry-After header, in seconds, if set
	code       string // the envelope's code when not the HTTP status, e.g. ErrCodeModelNotFound
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: openai.TypeInvalidRequest, param: param,
		msg: fmt.Sprintf(format, args...), kind: errKindBadRequest}
}

// parsedRequest is a validated request: the original body (forwarded to the
// worker), its decoded form, and its tokens and block hashes.
type parsedRequest struct {
	body   []byte
	req    openai.CompletionRequest
	tokens []uint32
	hashes []uint64
	// workers is the pool as it was when the request was read; model is
	// what its model name resolved to among them.
	workers []Worker
	model   modelRoute
	api     *apiRequest // a Messages or Responses request; nil for chat and completions
	noKV    bool        // an embedding: it leaves no KV to route to or move
	timing  timing      // when it reached each stage of the hop
	// after is the router's work left for once the request is on its way
	// (Decision.After), run by runAfter.
	after []func()
}

// runAfter runs, once each, the work the router's decisions left for
// once the request is on its way: at the upstream write, or when the
// request is done if it never got that far.
func (pr *parsedRequest) runAfter() {
	for _, f := range pr.after {
		f()
	}
	pr.after = pr.after[:0]
}

// maxTokens is the request's output limit, max_tokens or else
// max_completion_tokens; 0 when it sets neither.
func (pr *parsedRequest) maxTokens() int {
	switch {
	case pr.req.MaxTokens != nil:
		return *pr.req.MaxTokens
	case pr.req.MaxCompletion != nil:
		return *pr.req.MaxCompletion
	}
	return 0
}

// readRequest reads, bounds, decodes, validates and tokenizes a request.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, ep endpoint) (*parsedRequest, *apiError) {
	body, aerr := s.readClientBody(w, r)
	if aerr != nil {
		return nil, aerr
	}
	read := time.Now()
	pr, aerr := s.parse(body, ep)
	if pr != nil {
		pr.timing[stageRead] = read
	}
	return pr, aerr
}

// readClientBody reads a request body within MaxBodyBytes and
// ClientReadTimeout.
func (s *Server) readClientBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	// A client that trickles its body holds a connection and a goroutine:
	// bound the read, then lift the deadline for the rest of the exchange
	// (a stream may run for minutes, watched by the write deadline instead).
	rc := http.NewResponseController(w)
	deadlineSet := rc.SetReadDeadline(time.Now().Add(s.cfg.ClientReadTimeout)) == nil
	body, err := readBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), r.ContentLength, s.cfg.MaxBodyBytes)
	if deadlineSet && err == nil {
		// Only on success: after a failed read net/http drains the rest of
		// the body before answering, which must stay bounded.
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: http.StatusRequestEntityTooLarge, typ: openai.TypeInvalidRequest,
				msg: fmt.Sprintf("frontend: request body exceeds %d bytes", mbe.Limit), kind: errKindBadRequest}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			return nil, &apiError{status: http.StatusRequestTimeout, typ: openai.TypeInvalidRequest, kind: errKindClientSlow,
				msg: fmt.Sprintf("frontend: request body not received within %v; send it at once", s.cfg.ClientReadTimeout)}
		}
		return nil, badRequest("", "frontend: read request body: %v", err)
	}
	return body, nil
}

// parse decodes, validates and tokenizes a chat or completions body.
func (s *Server) parse(body []byte, ep endpoint) (*parsedRequest, *apiError) {
	pr := &parsedRequest{body: body}
	// kv_transfer_params is the frontend's, for disaggregated serving: from
	// a client it would make a worker pin blocks or dial any host. The body
	// is forwarded as sent, so what the engine reads must be what was
	// checked here: no second spelling of a key, no bytes that are not UTF-8.
	fe, err := openai.DecodeChecked(body, &pr.req, "kv_transfer_params")
	if err != nil {
		var pe *openai.ContentPartError
		if errors.As(err, &pe) {
			return nil, badRequest("messages", "frontend: message content part type %q is not supported; send text parts only", pe.Type)
		}
		var pre *openai.PromptError
		if errors.As(err, &pre) {
			return nil, badRequest("prompt", "frontend: %s", pre.Msg)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field, msg := openai.TypeError(te)
			return nil, badRequest(field, "frontend: %s", msg)
		}
		return nil, badRequest("", "frontend: request body is not valid JSON: %v", err)
	}
	if fe != nil {
		return nil, badRequest(fe.Param, "frontend: %s", fe.Msg)
	}
	pr.timing.mark(stageDecode)
	req := &pr.req
	if req.Model == "" {
		return nil, badRequest("model", "frontend: model is required")
	}
	pr.workers = s.deps.Workers.List()
	var aerr *apiError
	if pr.model, aerr = s.resolveModel(pr.workers, req.Model); aerr != nil {
		return nil, aerr
	}
	if req.MaxTokens != nil && *req.MaxTokens <= 0 {
		return nil, badRequest("max_tokens", "frontend: max_tokens must be positive, got %d", *req.MaxTokens)
	}
	if req.MaxCompletion != nil && *req.MaxCompletion <= 0 {
		return nil, badRequest("max_completion_tokens", "frontend: max_completion_tokens must be positive, got %d", *req.MaxCompletion)
	}
	// The OpenAI API's ranges; vLLM rejects the same values.
	if req.Temperature != nil && (*req.Temperature < 0 || *req.Temperature > 2) {
		return nil, badRequest("temperature", "frontend: temperature must be in [0, 2], got %v", *req.Temperature)
	}
	if req.TopP != nil && (*req.TopP <= 0 || *req.TopP > 1) {
		return nil, badRequest("top_p", "frontend: top_p must be in (0, 1], got %v", *req.TopP)
	}
	if fe := req.CheckParams(ep.chat); fe != nil {
		return nil, badRequest(fe.Param, "frontend: %s", fe.Msg)
	}
	if req.StreamOptions != nil && !req.Stream {
		return nil, badRequest("stream_options", "frontend: stream_options is only allowed with stream: true")
	}
	// The longest context every worker of the model takes: a longer prompt
	// is refused before it costs memory in tokens, hashes and records.
	maxLen := maxModelLen(pr.workers, &pr.model)
	if ep.chat {
		if len(req.Messages) == 0 {
			return nil, badRequest("messages", "frontend: messages is required and must not be empty")
		}
		if err := openai.CheckRoles(req.Messages); err != nil {
			return nil, badRequest("messages", "frontend: %v", err)
		}
		if n, over := tooLong(pr.model.tok, messageTexts(req.Messages), maxLen); over {
			return nil, contextError("messages", req.Model, n, maxLen)
		}
		toks, err := pr.model.tok.EncodeChat(req.Messages, routingChatOptions(req))
		if err != nil {
			return nil, badRequest("messages", "frontend: %v", err)
		}
		pr.tokens = toks
	} else {
		switch {
		case req.Prompt == nil:
			return nil, badRequest("prompt", "frontend: prompt is required")
		case req.Prompt.IsTokens:
			if len(req.Prompt.Tokens) == 0 {
				return nil, badRequest("prompt", "frontend: prompt token list must not be empty")
			}
			pr.tokens = req.Prompt.Tokens
		default:
			if n, over := tooLong(pr.model.tok, []string{req.Prompt.Text}, maxLen); over {
				return nil, contextError("prompt", req.Model, n, maxLen)
			}
			pr.tokens = pr.model.tok.EncodePrompt(req.Prompt.Text)
		}
	}
	if maxLen > 0 && len(pr.tokens) > maxLen {
		// Refused before it is hashed, routed and recorded: no worker
		// could take it.
		param := "prompt"
		if ep.chat {
			param = "messages"
		}
		return nil, contextError(param, req.Model, len(pr.tokens), maxLen)
	}
	salt := req.CacheSalt
	if pr.model.adapter != "" {
		// An adapter's blocks are another cache: the bridge and the
		// simulator root them the same way.
		salt = kvindex.LoRASalt(pr.model.adapter, salt)
	}
	bs := pr.model.blockSize
	pr.hashes = kvindex.HashChain(make([]uint64, 0, len(pr.tokens)/bs), salt, pr.tokens, bs)
	pr.timing.mark(stageTokenize)
	return pr, nil
}

// readBody reads r whole. A body that states its length is read into one
// buffer of that size (io.ReadAll would grow and copy it ~10 times for a
// long prompt); the limit still bounds what a wrong length can allocate.
func readBody(r io.Reader, length, limit int64) ([]byte, error) {
	if length <= 0 || length > limit {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, length+1) // +1: EOF is seen without growing
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			// Longer than stated: net/http would have failed the read;
			// finish like io.ReadAll anyway.
			rest, err := io.ReadAll(r)
			return append(b, rest...), err
		}
	}
}

// rewriteBody returns body with the given top-level fields replaced (a nil
// value deletes the field). Only the disaggregated path rewrites bodies;
// everything else is forwarded byte for byte.
func rewriteBody(body []byte, set map[string]json.RawMessage) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("frontend: rewrite body: %w", err)
	}
	for k, v := range set {
		// The engine may match keys case-sensitively or not: leave it one.
		for have := range fields {
			if strings.EqualFold(have, k) {
				delete(fields, have)
			}
		}
		if v != nil {
			fields[k] = v
		}
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("frontend: rewrite body: %w", err)
	}
	return out, nil
}

// routingChatOptions are the chat-template switches of req that the
// frontend's tokenizer renders (add_generation_prompt,
// continue_final_message, chat_template_kwargs.enable_thinking), so the
// prompt is hashed as the engine will tokenize it. Other template kwargs
// reach the engine untouched in the body; routing then hashes the prompt
// without them.
func routingChatOptions(req *openai.CompletionRequest) tokenizer.ChatOptions {
	o := tokenizer.ChatOptions{AddGenerationPrompt: !req.ContinueFinalMessage, ContinueFinalMessage: req.ContinueFinalMessage}
	if req.AddGenerationPrompt != nil {
		o.AddGenerationPrompt = *req.AddGenerationPrompt
	}
	if b, ok := req.ChatTemplateKwargs["enable_thinking"].(bool); ok {
		o.EnableThinking = &b
	}
	return o
}
