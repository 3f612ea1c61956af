package frontend

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
)

// APIs a worker may serve itself besides chat and completions, as
// Worker.APIs names them.
const (
	APIMessages   = "messages"   // POST /v1/messages, Anthropic's Messages API
	APIResponses  = "responses"  // POST /v1/responses, OpenAI's Responses API
	APIEmbeddings = "embeddings" // POST /v1/embeddings
)

// The endpoints of the two translated APIs: routed, and forwarded when the
// worker does not serve the API, as chat completions.
var (
	endpointMessages  = endpoint{name: APIMessages, path: "/v1/chat/completions", chat: true}
	endpointResponses = endpoint{name: APIResponses, path: "/v1/chat/completions", chat: true}
)

// apiRequest is the part of a Messages or Responses request that chat
// has not: the client's own body, for a worker that serves the API, and
// the writer that answers in the API's shape.
type apiRequest struct {
	kind       string // APIMessages or APIResponses
	nativePath string
	raw        []byte // the client's body
	tr         *openai.Translator
	native     bool   // the attempt in progress went to a worker serving the API
	prevWorker string // the worker holding previous_response_id's state
	store      bool   // a Responses request the engine stores
	// salted: a tenant's cache salt applies, which only the chat body
	// carries, so the request is translated whatever the worker serves.
	salted bool
}

// serves reports whether wk serves api itself.
func (wk *Worker) serves(api string) bool { return slices.Contains(wk.APIs, api) }

// prepareAttempt picks the path and body of one attempt at a Messages or
// Responses request: the client's body to a worker that serves the API,
// else the chat translation. A remote prefill's kv_transfer_params ride a
// chat body, so such a request is translated.
func (a *apiRequest) prepareAttempt(wk Worker, rt *route, path string, body []byte) (string, []byte) {
	a.native = wk.serves(a.kind) && !(rt.gated && rt.gate.Remote) && !a.salted
	a.tr.Native = a.native
	if a.native {
		return a.nativePath, a.raw
	}
	return path, body
}

// handleAPI serves POST /v1/messages or POST /v1/responses: decoded,
// rendered into chat turns, tokenized and routed as the same chat would
// be, forwarded as sent to a worker that serves the API and translated
// to and from a chat completion for one that does not.
func (s *Server) handleAPI(ep endpoint) http.HandlerFunc {
	return s.handleGenerate(ep, func(w http.ResponseWriter, r *http.Request, reqID string) (*parsedRequest, *apiError) {
		body, aerr := s.readClientBody(w, r)
		if aerr != nil {
			return nil, aerr
		}
		if ep.name == APIMessages {
			return s.parseMessages(w, body, reqID)
		}
		return s.parseResponses(w, body, reqID)
	})
}

// finish writes a whole answer the translator holds, and counts the usage
// of an answer the relay could not read (in the API's own shape).
func (a *apiRequest) finish(s *Server) {
	a.tr.Finish()
	if a.native && a.tr.Usage() != nil {
		s.countUsage(a.tr.Usage())
	}
}

// failAPI writes e in the shape of the API the client called.
func (s *Server) failAPI(w http.ResponseWriter, api string, e *apiError) {
	if api != APIMessages {
		s.fail(w, e)
		return
	}
	if !e.counted {
		s.m.errors.WithLabelValues(e.kind).Inc()
	}
	if e.retryAfter != "" {
		w.Header().Set("Retry-After", e.retryAfter)
	}
	openai.WriteAnthropicError(w, e.status, e.msg)
}

// routeChat resolves the model, and tokenizes and hashes a translated
// request as the chat completion it translates into, so that its prefix
// routes, and hashes, as the same transcript sent to /v1/chat/completions.
func (s *Server) routeChat(chat *openai.ChatBody, api *apiRequest) (*parsedRequest, *apiError) {
	body, err := json.Marshal(chat)
	if err != nil {
		return nil, &apiError{status: http.StatusInternalServerError, typ: openai.TypeServer, msg: "frontend: encode chat body: " + err.Error(), kind: errKindBadRequest}
	}
	pr := &parsedRequest{body: body, req: chat.Completion(), api: api, workers: s.deps.Workers.List()}
	var aerr *apiError
	if pr.model, aerr = s.resolveModel(pr.workers, chat.Model); aerr != nil {
		return nil, aerr
	}
	if len(pr.req.Messages) > 0 {
		toks, err := pr.model.tok.EncodeChat(pr.req.Messages, routingChatOptions(&pr.req))
		if err != nil {
			return nil, badRequest("messages", "frontend: %v", err)
		}
		pr.tokens = toks
	}
	salt := ""
	if pr.model.adapter != "" {
		salt = kvindex.LoRASalt(pr.model.adapter, salt)
	}
	bs := pr.model.blockSize
	pr.hashes = kvindex.HashChain(make([]uint64, 0, len(pr.tokens)/bs), salt, pr.tokens, bs)
	return pr, nil
}

func (s *Server) parseMessages(w http.ResponseWriter, body []byte, reqID string) (*parsedRequest, *apiError) {
	req, fe := openai.DecodeAnthropic(body)
	if fe != nil {
		return nil, badRequest(fe.Param, "frontend: %s", fe.Msg)
	}
	api := &apiRequest{kind: APIMessages, nativePath: "/v1/messages", raw: body}
	pr, aerr := s.routeChat(req.Chat(), api)
	if aerr != nil {
		return nil, aerr
	}
	api.tr = openai.NewAnthropicTranslator(w, req, "msg_"+reqID, len(pr.tokens))
	return pr, nil
}

func (s *Server) parseResponses(w http.ResponseWriter, body []byte, reqID string) (*parsedRequest, *apiError) {
	req, fe := openai.DecodeResponses(body)
	if fe != nil {
		return nil, badRequest(fe.Param, "frontend: %s", fe.Msg)
	}
	api := &apiRequest{kind: APIResponses, nativePath: "/v1/responses", raw: body, store: req.Store == nil || *req.Store}
	if id := req.PreviousResponseID; id != "" {
		wid, ok := s.affinity.get(id)
		if !ok {
			return nil, badRequest("previous_response_id", "frontend: previous_response_id %q is not known here: no worker of this deployment stored it, or it was forgotten; send the whole conversation as input", id)
		}
		if !slices.ContainsFunc(s.deps.Workers.List(), func(wk Worker) bool { return wk.ID == wid }) {
			return nil, badRequest("previous_response_id", "frontend: response %q is stored on worker %s, which is gone, and its state went with it; send the whole conversation as input instead of previous_response_id", id, wid)
		}
		api.prevWorker = wid
	}
	pr, aerr := s.routeChat(req.Chat(nil), api)
	if aerr != nil {
		return nil, aerr
	}
	api.tr = openai.NewResponsesTranslator(w, req, "resp_"+reqID)
	if api.store {
		// Only an engine serving the API stores the response: the id is
		// known from its answer, and its worker from the route headers.
		api.tr.OnID = func(id string) {
			if !api.native {
				return
			}
			wid := w.Header().Get(HeaderWorker)
			s.affinity.put(id, wid)
			if s.deps.Responses != nil {
				s.deps.Responses.StoredResponse(id, wid)
			}
		}
	}
	return pr, nil
}

// handleCountTokens serves POST /v1/messages/count_tokens from the
// frontend's tokenizer: the prompt tokens of the chat the Messages request
// renders into.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	fail := func(e *apiError) { s.failAPI(w, APIMessages, e) }
	if !s.apiAuthorized(r) {
		fail(&apiError{status: http.StatusUnauthorized, typ: openai.TypeAuthentication,
			msg: "frontend: missing or wrong API key: send Authorization: Bearer <key> or x-api-key: <key>", kind: errKindUnauthorized})
		return
	}
	body, aerr := s.readClientBody(w, r)
	if aerr != nil {
		fail(aerr)
		return
	}
	req, fe := openai.DecodeCountTokens(body)
	if fe != nil {
		fail(badRequest(fe.Param, "frontend: %s", fe.Msg))
		return
	}
	pr, aerr := s.routeChat(req.Chat(), nil)
	if aerr != nil {
		fail(aerr)
		return
	}
	openai.WriteJSON(w, map[string]int{"input_tokens": len(pr.tokens)})
}

// endpointEmbeddings is POST /v1/embeddings, forwarded as sent.
var endpointEmbeddings = endpoint{name: APIEmbeddings, path: "/v1/embeddings"}

// handleEmbeddings serves POST /v1/embeddings: routed by load (an
// embedding caches nothing a later request could reuse) among the
// workers of the model that serve the endpoint, and forwarded as sent.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(endpointEmbeddings, s.parseEmbeddings)(w, r)
}

func (s *Server) parseEmbeddings(w http.ResponseWriter, r *http.Request, _ string) (*parsedRequest, *apiError) {
	body, aerr := s.readClientBody(w, r)
	if aerr != nil {
		return nil, aerr
	}
	var req struct {
		Model string          `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, badRequest("", "frontend: request body is not a JSON object: %v", err)
	}
	if req.Model == "" {
		return nil, badRequest("model", "frontend: model is required")
	}
	if len(req.Input) == 0 || string(req.Input) == "null" {
		return nil, badRequest("input", "frontend: input is required")
	}
	pr := &parsedRequest{body: body, req: openai.CompletionRequest{Model: req.Model}, workers: s.deps.Workers.List(), noKV: true}
	if pr.model, aerr = s.resolveModel(pr.workers, req.Model); aerr != nil {
		return nil, aerr
	}
	// The length, for the router's load accounting; no block hashes: an
	// embedding leaves nothing in the KV cache to route to.
	var texts []string
	if json.Unmarshal(req.Input, &texts) != nil {
		var one string
		if json.Unmarshal(req.Input, &one) == nil {
			texts = []string{one}
		}
	}
	for _, t := range texts {
		pr.tokens = append(pr.tokens, pr.model.tok.Encode(t)...)
	}
	return pr, nil
}

// handleDetokenize serves POST /detokenize as vLLM does, {"tokens": [...]}
// to {"prompt": text}, with the tokenizer the frontend routes by.
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	if !s.apiAuthorized(r) {
		s.fail(w, &apiError{status: http.StatusUnauthorized, typ: openai.TypeAuthentication,
			msg: "frontend: missing or wrong API key: send Authorization: Bearer <key>", kind: errKindUnauthorized})
		return
	}
	body, aerr := s.readClientBody(w, r)
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	var req struct {
		Model  string   `json:"model"`
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.fail(w, badRequest("tokens", "frontend: detokenize wants {\"tokens\": [ids]}: %v", err))
		return
	}
	tok := s.tok
	if req.Model != "" {
		mr, aerr := s.resolveModel(s.deps.Workers.List(), req.Model)
		if aerr != nil {
			s.fail(w, aerr)
			return
		}
		tok = mr.tok
	}
	d, ok := tok.(interface{ Decode([]uint32) string })
	if !ok {
		s.fail(w, &apiError{status: http.StatusNotImplemented, typ: openai.TypeServer, kind: errKindBadRequest,
			msg: "frontend: this tokenizer cannot decode; ask a worker's /detokenize"})
		return
	}
	openai.WriteJSON(w, map[string]string{"prompt": d.Decode(req.Tokens)})
}

// NoteStoredResponse records that worker stored response id, as a peer
// frontend reports it: previous_response_id naming it goes there.
func (s *Server) NoteStoredResponse(id, worker string) { s.affinity.put(id, worker) }
