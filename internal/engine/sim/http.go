package sim

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// MaxBodyBytes bounds a request body; larger ones get 413. 8 MiB holds a
// prompt of well over a million characters.
const MaxBodyBytes = 8 << 20

// Response headers carrying a non-streaming request's simulated timings,
// in milliseconds.
const (
	HeaderTTFT    = "x-sim-ttft-ms"
	HeaderQueue   = "x-sim-queue-ms"
	HeaderPrefill = "x-sim-prefill-ms"
	HeaderE2E     = "x-sim-e2e-ms"
	HeaderCached  = "x-sim-cached-tokens"
)

// Response headers of a request that carried a remote prefill's
// kv_transfer_params: the KV bytes this worker received and verified
// before scheduling the request, and how long the pull took in
// milliseconds (wall clock: it crosses a real link). Both are 0 when every
// block was cached here already.
const (
	HeaderKVPulledBytes = "x-kv-pulled-bytes"
	HeaderKVPullMS      = "x-kv-pull-ms"
)

// Handler serves the worker's HTTP API: /v1/completions,
// /v1/chat/completions, /v1/models, /health, /metrics and
// /reset_prefix_cache.
//
// Unknown paths and wrong methods get OpenAI error envelopes.
func (w *Worker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(rw http.ResponseWriter, r *http.Request) { w.serveGenerate(rw, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(rw http.ResponseWriter, r *http.Request) { w.serveGenerate(rw, r, true) })
	mux.HandleFunc("GET /v1/models", w.serveModels)
	mux.HandleFunc("POST /v1/load_lora_adapter", w.serveLoadLoRA)
	mux.HandleFunc("POST /v1/unload_lora_adapter", w.serveUnloadLoRA)
	mux.HandleFunc("POST /tokenize", w.serveTokenize)
	mux.HandleFunc("POST /detokenize", w.serveDetokenize)
	mux.HandleFunc("POST /v1/messages", w.serveMessages)
	mux.HandleFunc("POST /v1/responses", w.serveResponses)
	mux.HandleFunc("POST /v1/embeddings", w.serveEmbeddings)
	mux.HandleFunc("GET /health", func(rw http.ResponseWriter, r *http.Request) {
		if w.Stopped() {
			openai.WriteError(rw, http.StatusServiceUnavailable, openai.TypeUnavailable, "", "worker "+w.cfg.ID+": engine stopped")
			return
		}
		openai.WriteJSON(rw, map[string]string{"status": "ok", "id": w.cfg.ID})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(w.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /reset_prefix_cache", func(rw http.ResponseWriter, r *http.Request) {
		n := w.ResetPrefixCache()
		openai.WriteJSON(rw, map[string]int{"cleared_blocks": n})
	})
	return openai.Mux(mux)
}

// serveModels lists what vLLM would: each served name, then each LoRA
// adapter with its base as parent and its path as root.
func (w *Worker) serveModels(rw http.ResponseWriter, _ *http.Request) {
	base := w.servedName()
	model := func(id, root string, parent *string) openai.Model {
		return openai.Model{ID: id, Object: "model", Created: w.startWall.Unix(), OwnedBy: "switchyard", MaxModelLen: w.maxLen, Root: root, Parent: parent}
	}
	data := []openai.Model{model(base, w.cfg.Model, nil)}
	for _, a := range w.aliases() {
		data = append(data, model(a, w.cfg.Model, nil))
	}
	for _, a := range w.adapterList() {
		data = append(data, model(a.Name, cmp.Or(a.Root, a.Name), &base))
	}
	openai.WriteJSON(rw, openai.ModelList{Object: "list", Data: data})
}

// apiError is an OpenAI-shaped error on its way to the client.
type apiError struct {
	status int
	typ    string
	param  string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, openai.TypeInvalidRequest, param, fmt.Sprintf(format, args...)}
}

// DecodeRequest parses a completions or chat request body strictly enough
// to give a precise error: malformed JSON, a field of the wrong type,
// trailing data.
func DecodeRequest(body []byte) (*openai.CompletionRequest, error) {
	var req openai.CompletionRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	// A field the engine does not know would otherwise be dropped silently.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			if f, uerr := strconv.Unquote(name); uerr == nil {
				name = f
			}
			return nil, notSupported(name, "it is not a field this engine knows")
		}
		var pe *openai.ContentPartError
		if errors.As(err, &pe) {
			return nil, badRequest("messages", "message content part type %q is not supported; send text parts only", pe.Type)
		}
		var pre *openai.PromptError
		if errors.As(err, &pre) {
			return nil, badRequest("prompt", "%s", pre.Msg)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field, msg := openai.TypeError(te)
			return nil, badRequest(field, "%s", msg)
		}
		return nil, badRequest("", "malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("", "malformed JSON body: data after the request object")
	}
	return &req, nil
}

// genRequest is a validated request, ready for the engine.
type genRequest struct {
	req        *openai.CompletionRequest
	tokens     []uint32
	maxTokens  int // 0: natural stop
	n          int // choices
	remoteDec  bool
	remotePref bool
	adapter    string      // the LoRA adapter named as the model; "" for the base model
	salt       string      // roots the prompt's block chain: cache_salt, and the adapter's name
	tool       *forcedTool // the function the answer must call; nil: text
}

// validate checks a decoded request against this worker.
func (w *Worker) validate(req *openai.CompletionRequest, chat bool) (*genRequest, *apiError) {
	adapter, ok := w.resolveModel(req.Model)
	if !ok {
		return nil, &apiError{http.StatusNotFound, openai.TypeNotFound, "model", fmt.Sprintf("model %q does not exist; this worker serves %q", req.Model, w.servedName())}
	}
	g := &genRequest{req: req, adapter: adapter, salt: req.CacheSalt}
	if adapter != "" {
		g.salt = kvindex.LoRASalt(adapter, req.CacheSalt)
	}
	if chat {
		if len(req.Messages) == 0 {
			return nil, badRequest("messages", "messages must be a non-empty array")
		}
		if err := openai.CheckRoles(req.Messages); err != nil {
			return nil, badRequest("messages", "%v", err)
		}
		o, err := tokenizer.ChatOptionsOf(req.AddGenerationPrompt, req.ContinueFinalMessage, req.ChatTemplateKwargs)
		if err != nil {
			return nil, badRequest("chat_template_kwargs", "%v", err)
		}
		toks, err := w.tok.EncodeChat(req.Messages, o)
		if err != nil {
			return nil, badRequest("messages", "%v", err)
		}
		g.tokens = toks
	} else {
		switch {
		case req.Prompt == nil:
			return nil, badRequest("prompt", "prompt is required")
		case req.Prompt.IsTokens:
			for _, t := range req.Prompt.Tokens {
				if int(t) >= w.tok.VocabSize() {
					return nil, badRequest("prompt", "token id %d is outside the vocabulary (size %d)", t, w.tok.VocabSize())
				}
			}
			g.tokens = req.Prompt.Tokens
		default:
			g.tokens = w.tok.EncodePrompt(req.Prompt.Text)
		}
	}
	if len(g.tokens) == 0 {
		return nil, badRequest("prompt", "prompt is empty")
	}
	mt, mtParam := req.MaxTokens, "max_tokens"
	if mt == nil {
		mt, mtParam = req.MaxCompletion, "max_completion_tokens"
	}
	if mt != nil && *mt <= 0 {
		return nil, badRequest(mtParam, "%s must be at least 1, got %d", mtParam, *mt)
	}
	// The context length first, as vLLM checks it, then whether the cache
	// can ever hold the request.
	promptParam := "prompt"
	if chat {
		promptParam = "messages"
	}
	if aerr := w.checkContext(len(g.tokens), mt, promptParam, mtParam); aerr != nil {
		return nil, aerr
	}
	output, param := 1, promptParam
	if mt != nil {
		output, param = *mt, mtParam
		g.maxTokens = *mt
	}
	if err := w.checkLength(len(g.tokens), output); err != nil {
		if mt != nil && w.checkLength(len(g.tokens), 1) != nil {
			param = promptParam // the prompt alone can never fit
		}
		return nil, badRequest(param, "%v", err)
	}
	if req.MinTokens != nil && (*req.MinTokens < 0 || (mt != nil && *req.MinTokens > *mt)) {
		return nil, badRequest("min_tokens", "min_tokens must be between 0 and max_tokens")
	}
	if req.Temperature != nil && (*req.Temperature < 0 || *req.Temperature > 2) {
		return nil, badRequest("temperature", "temperature must be in [0, 2], got %v", *req.Temperature)
	}
	if req.TopP != nil && (*req.TopP <= 0 || *req.TopP > 1) {
		return nil, badRequest("top_p", "top_p must be in (0, 1], got %v", *req.TopP)
	}
	if fe := req.CheckParams(chat); fe != nil {
		return nil, badRequest(fe.Param, "%s", fe.Msg)
	}
	if aerr := unsupported(req, chat); aerr != nil {
		return nil, aerr
	}
	if chat {
		var aerr *apiError
		if g.tool, aerr = toolsOf(req); aerr != nil {
			return nil, aerr
		}
	}
	g.n = 1
	if req.N != nil {
		g.n = *req.N
	}
	if req.StreamOptions != nil && !req.Stream {
		return nil, badRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	if v, ok := req.KVTransferParams["do_remote_decode"].(bool); ok && v {
		g.remoteDec = true
		if w.cfg.Leaser == nil {
			return nil, badRequest("kv_transfer_params", "this worker has no KV transfer configured")
		}
		if req.Stream {
			return nil, badRequest("stream", "a prefill request (do_remote_decode) must not stream")
		}
		if g.n > 1 {
			return nil, badRequest("n", "a prefill request (do_remote_decode) serves one decode; n must be 1")
		}
	}
	if v, ok := req.KVTransferParams["do_remote_prefill"].(bool); ok && v {
		g.remotePref = true
		if w.cfg.Puller == nil {
			return nil, badRequest("kv_transfer_params", "this worker has no KV transfer configured")
		}
	}
	return g, nil
}

// checkContext rejects a request longer than the context this worker
// advertises as max_model_len, in vLLM's words: the prompt, plus max_tokens
// or (without it) the one token every request generates. param names the
// prompt when it is too long by itself, else the max_tokens field used.
func (w *Worker) checkContext(prompt int, maxTokens *int, promptParam, mtParam string) *apiError {
	completion := 1
	if maxTokens != nil {
		completion = *maxTokens
	}
	total := uint64(prompt) + uint64(completion) // max_tokens may be MaxInt
	if total <= uint64(w.maxLen) {
		return nil
	}
	param := promptParam
	if maxTokens != nil && prompt < w.maxLen {
		param = mtParam
	}
	// vLLM's words, with the prompt named as the client sent it.
	what := "prompt"
	if promptParam == "messages" {
		what = "messages"
	}
	return badRequest(param, "This model's maximum context length is %d tokens. However, you requested %d tokens "+
		"(%d in the %s, %d in the completion). Please reduce the length of the %s or completion.",
		w.maxLen, total, prompt, what, completion, what)
}

func (w *Worker) serveGenerate(rw http.ResponseWriter, r *http.Request, chat bool) {
	reqID := r.Header.Get("x-request-id")
	if reqID == "" {
		reqID = fmt.Sprintf("%s-%d", w.cfg.ID, w.reqID.Add(1))
	}
	rw.Header().Set("x-request-id", reqID)
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(rw, &apiError{http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "", fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes)})
			return
		}
		writeErr(rw, badRequest("", "reading request body: %v", err))
		return
	}
	req, err := DecodeRequest(body)
	if err != nil {
		writeErr(rw, err)
		return
	}
	w.generate(rw, r, req, reqID, chat)
}

// generate serves a decoded completions or chat request.
func (w *Worker) generate(rw http.ResponseWriter, r *http.Request, req *openai.CompletionRequest, reqID string, chat bool) {
	g, aerr := w.validate(req, chat)
	if aerr != nil {
		writeErr(rw, aerr)
		return
	}
	ctx := r.Context()
	var queuedAt time.Duration
	if g.remotePref {
		// The request holds its place in the queue from now, as vLLM's
		// does while it pulls (Request.QueuedAt).
		queuedAt = w.Now()
		// Set before any answer is written: the pull precedes scheduling.
		n, d := w.pullRemote(ctx, reqID, g)
		rw.Header().Set(HeaderKVPulledBytes, strconv.FormatInt(n, 10))
		rw.Header().Set(HeaderKVPullMS, msString(d))
	}
	if g.adapter != "" && w.loras != nil {
		if _, err := w.loras.acquire(ctx, g.adapter); err != nil {
			return // the client left while the request waited for an adapter slot
		}
		defer w.loras.release(g.adapter)
	}
	choices := make([]*choice, g.n)
	for i := range choices {
		c := &choice{}
		r := Request{ID: reqID, Tokens: g.tokens, Salt: g.salt, MaxTokens: g.maxTokens, MinTokens: deref(req.MinTokens),
			IgnoreEOS: req.IgnoreEOS, Seed: req.Seed, Pin: g.remoteDec, Choice: i, QueuedAt: queuedAt}
		if i > 0 {
			r.ID = fmt.Sprintf("%s.%d", reqID, i)
		}
		if len(req.Stop) > 0 {
			c.stop = newStopMatcher(w.tok, req.Stop)
			r.Stop = c.stop.feed
		}
		st, err := w.Submit(r)
		if err != nil {
			writeErr(rw, engineError(err))
			return
		}
		defer st.Close()
		c.st = st
		choices[i] = c
	}
	st := choices[0].st
	// A prefill for remote decode pins its blocks when it finishes; if the
	// client goes away before they are handed to a lease, nothing else will
	// ever release them.
	leased := false
	if g.remoteDec {
		defer func() {
			if p := st.Result().Pinned; p != nil && !leased {
				p.Release()
			}
		}()
	}
	if req.Stream {
		w.stream(ctx, rw, choices, reqID, chat, req, g.tool)
		return
	}
	for _, c := range choices {
		for {
			toks, done, err := c.st.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					writeErr(rw, engineError(err))
				}
				return // the client is gone; Close frees the blocks
			}
			c.text = append(c.text, w.tok.Decode(toks)...)
			if done {
				break
			}
		}
	}
	res := st.Result()
	var kvp map[string]any
	if g.remoteDec {
		leased = true // lease owns the pin from here, success or not
		if kvp, aerr = w.lease(reqID, res.Pinned); aerr != nil {
			writeErr(rw, aerr)
			return
		}
	}
	results := make([]Result, len(choices))
	e2e := res.E2E
	for i, c := range choices {
		results[i] = c.st.Result()
		e2e = max(e2e, results[i].E2E)
	}
	h := rw.Header()
	h.Set(HeaderTTFT, msString(res.TTFT))
	h.Set(HeaderQueue, msString(res.Queue))
	h.Set(HeaderPrefill, msString(res.Prefill))
	h.Set(HeaderE2E, msString(e2e))
	h.Set(HeaderCached, strconv.Itoa(res.CachedTokens))
	usage := w.usageOf(results)
	created := time.Now().Unix()
	if chat && g.tool != nil {
		type toolChoice struct {
			Index        int         `json:"index"`
			Message      toolMessage `json:"message"`
			FinishReason string      `json:"finish_reason"`
			Logprobs     any         `json:"logprobs"`
		}
		out := make([]toolChoice, len(choices))
		for i, c := range choices {
			call := g.tool.call(reqID, i, string(c.final()))
			call.Index = nil
			out[i] = toolChoice{Index: i, Message: toolMessage{Role: "assistant", ToolCalls: []openai.ToolCall{call}}, FinishReason: "tool_calls"}
		}
		openai.WriteJSON(rw, map[string]any{"id": "chatcmpl-" + reqID, "object": "chat.completion", "created": created,
			"model": cmp.Or(req.Model, w.servedName()), "choices": out, "usage": usage})
		return
	}
	if chat {
		out := make([]openai.ChatChoice, len(choices))
		for i, c := range choices {
			out[i] = openai.ChatChoice{Index: i, Message: openai.Message{Role: "assistant", Content: string(c.final())},
				FinishReason: openai.StringPtr(results[i].FinishReason), StopReason: c.stopReason()}
		}
		openai.WriteJSON(rw, openai.ChatResponse{
			ID: "chatcmpl-" + reqID, Object: "chat.completion", Created: created, Model: cmp.Or(req.Model, w.servedName()),
			Choices: out, Usage: usage, KVTransferParams: kvp,
		})
		return
	}
	out := make([]openai.CompletionChoice, len(choices))
	for i, c := range choices {
		out[i] = openai.CompletionChoice{Index: i, Text: string(c.final()), FinishReason: openai.StringPtr(results[i].FinishReason)}
	}
	openai.WriteJSON(rw, openai.CompletionResponse{
		ID: "cmpl-" + reqID, Object: "text_completion", Created: created, Model: cmp.Or(req.Model, w.servedName()),
		Choices: out, Usage: usage, KVTransferParams: kvp,
	})
}

// lease hands a prefill's pinned blocks to the Leaser and describes them
// for the decode worker, as vLLM's P/D connector does.
func (w *Worker) lease(reqID string, p *PinnedSet) (map[string]any, *apiError) {
	token, err := w.cfg.Leaser.Lease(p.Hashes, p.Release)
	if err != nil {
		p.Release()
		return nil, &apiError{http.StatusInternalServerError, openai.TypeServer, "", fmt.Sprintf("sim: lease blocks: %v", err)}
	}
	host, port, _ := net.SplitHostPort(w.cfg.KVXferAddr)
	portN, _ := strconv.Atoi(port)
	ids := p.Hashes
	if ids == nil {
		ids = []uint64{}
	}
	return map[string]any{
		"do_remote_prefill": true,
		"do_remote_decode":  false,
		"remote_engine_id":  w.cfg.ID,
		"remote_block_ids":  ids,
		"remote_host":       host,
		"remote_port":       portN,
		"remote_request_id": reqID,
		"lease":             token,
		"tp_size":           w.cfg.TP,
	}, nil
}

// pullRemote fetches a remote prefill's blocks into the cache before the
// request is scheduled. Blocks must arrive in this prompt's own chain
// order; a failure leaves what arrived and the rest is recomputed. It
// returns the payload bytes of the blocks received and verified, and how
// long the pull took.
func (w *Worker) pullRemote(ctx context.Context, reqID string, g *genRequest) (int64, time.Duration) {
	chain := kvindex.HashChain(nil, g.salt, g.tokens, w.bs)
	// Pull only what is not cached here already: the gate predicted the
	// transfer of the uncached tokens, and moving the rest would waste the
	// link. A block evicted before scheduling is simply recomputed.
	have := w.CachedPrefix(chain)
	want := chain[have:]
	parent := kvindex.Root(g.salt)
	if have > 0 {
		parent = chain[have-1]
	}
	if len(want) == 0 {
		return 0, 0
	}
	var got []uint64
	insert := func(h uint64) error {
		if len(got) >= len(want) || want[len(got)] != h {
			return fmt.Errorf("sim: received block %016x is not block %d of this prompt", h, len(got))
		}
		got = append(got, h)
		return nil
	}
	start := time.Now()
	err := w.cfg.Puller.Pull(ctx, g.req.KVTransferParams, want, insert)
	took := time.Since(start)
	if len(got) > 0 {
		if ierr := w.InsertBlocks(parent, got); ierr != nil {
			err = errors.Join(err, ierr)
		}
		w.metrics.pulledBlocks.Add(float64(len(got)))
	}
	if err != nil {
		w.metrics.pullFailures.Inc()
		w.cfg.Logger.Warn("sim: remote prefill failed; recomputing locally", "worker", w.cfg.ID, "request_id", reqID, "blocks_received", len(got), "blocks_wanted", len(want), "err", err)
	}
	return int64(len(got)) * int64(w.BlockBytes()), took
}

func (w *Worker) stream(ctx context.Context, rw http.ResponseWriter, choices []*choice, reqID string, chat bool, req *openai.CompletionRequest, tool *forcedTool) {
	sse := openai.NewSSEWriter(rw)
	rw.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	id := "cmpl-" + reqID
	if chat {
		id = "chatcmpl-" + reqID
	}
	chunk := func(index int, text string, role string, finish *string) error {
		if chat {
			d := openai.Delta{Role: role}
			if role == "" && finish == nil {
				d.Content = &text
			}
			var stop any
			if finish != nil {
				stop = choices[index].stopReason()
			}
			return sse.Event(openai.ChatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: cmp.Or(req.Model, w.servedName()),
				Choices: []openai.ChatChunkChoice{{Index: index, Delta: d, FinishReason: finish, StopReason: stop}}})
		}
		return sse.Event(struct {
			ID      string                    `json:"id"`
			Object  string                    `json:"object"`
			Created int64                     `json:"created"`
			Model   string                    `json:"model"`
			Choices []openai.CompletionChoice `json:"choices"`
			Usage   *openai.Usage             `json:"usage"`
		}{id, "text_completion", created, cmp.Or(req.Model, w.servedName()), []openai.CompletionChoice{{Index: index, Text: text, FinishReason: finish}}, nil})
	}
	if chat {
		for i := range choices {
			if chunk(i, "", "assistant", nil) != nil {
				return
			}
		}
	}
	// Choices advance in lockstep (one token per engine step each), so
	// reading them in turn delays none by more than a step.
	for active := len(choices); active > 0; {
		for i, c := range choices {
			if c.done {
				continue
			}
			toks, done, err := c.st.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					_ = sse.Error(http.StatusServiceUnavailable, openai.TypeUnavailable, err.Error())
				}
				return
			}
			c.text = append(c.text, w.tok.Decode(toks)...)
			if tool != nil {
				// The call is written whole, as one delta, once the text
				// it is made of is done.
				if done {
					c.done = true
					active--
					model := cmp.Or(req.Model, w.servedName())
					if sse.Event(toolChunk(id, created, model, i, tool.call(reqID, i, string(c.final())))) != nil ||
						sse.Event(openai.ChatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
							Choices: []openai.ChatChunkChoice{{Index: i, FinishReason: openai.StringPtr("tool_calls")}}}) != nil {
						return
					}
				}
				continue
			}
			if text := c.ready(done); len(text) > 0 && chunk(i, string(text), "", nil) != nil {
				return // client gone: Close aborts the request
			}
			if done {
				c.done = true
				active--
				if chunk(i, "", "", openai.StringPtr(c.st.Result().FinishReason)) != nil {
					return
				}
			}
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		results := make([]Result, len(choices))
		for i, c := range choices {
			results[i] = c.st.Result()
		}
		u := w.usageOf(results)
		var err error
		if chat {
			err = sse.Event(openai.ChatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: cmp.Or(req.Model, w.servedName()), Choices: []openai.ChatChunkChoice{}, Usage: u})
		} else {
			err = sse.Event(openai.CompletionResponse{ID: id, Object: "text_completion", Created: created, Model: cmp.Or(req.Model, w.servedName()), Choices: []openai.CompletionChoice{}, Usage: u})
		}
		if err != nil {
			return
		}
	}
	_ = sse.Done()
}

// usageOf is usageOf plus, on a worker with lower KV tiers, the cached
// tokens' split by tier.
func (w *Worker) usageOf(res []Result) *openai.Usage {
	u := usageOf(res)
	if w.cfg.KVOffloadGiB > 0 {
		r, kvb := &res[0], int64(w.KVBytesPerToken())
		u.PromptTokensDetails.KVTiers = &openai.KVTiers{
			GPUTokens: r.TierTokens[0], CPUTokens: r.TierTokens[1], DiskTokens: r.TierTokens[2],
			CPULoadedBytes: int64(r.TierTokens[1]) * kvb, DiskLoadedBytes: int64(r.TierTokens[2]) * kvb,
			LoadMs: float64(r.Load) / float64(time.Millisecond),
		}
	}
	return u
}

// usageOf accounts the choices of one request: the prompt once (as vLLM
// does for n > 1), the completions of every choice.
func usageOf(res []Result) *openai.Usage {
	completion := 0
	for _, r := range res {
		completion += len(r.Output)
	}
	return &openai.Usage{
		PromptTokens:        res[0].PromptTokens,
		CompletionTokens:    completion,
		TotalTokens:         res[0].PromptTokens + completion,
		PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: res[0].CachedTokens},
	}
}

func engineError(err error) *apiError {
	switch {
	case errors.Is(err, ErrNeverFits), errors.Is(err, ErrContextLength), errors.Is(err, ErrEmptyPrompt):
		return badRequest("prompt", "%v", err)
	case errors.Is(err, ErrStopped):
		return &apiError{http.StatusServiceUnavailable, openai.TypeUnavailable, "", err.Error()}
	}
	return &apiError{http.StatusInternalServerError, openai.TypeServer, "", err.Error()}
}

func writeErr(rw http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{http.StatusInternalServerError, openai.TypeServer, "", err.Error()}
	}
	openai.WriteError(rw, ae.status, ae.typ, ae.param, ae.msg)
}

func msString(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
