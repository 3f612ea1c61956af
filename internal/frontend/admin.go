package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// adminBodyLimit bounds admin request bodies; lookups carry a prompt.
const adminBodyLimit = 8 << 20

type routerState struct {
	Policy   string   `json:"policy"`
	Policies []string `json:"policies,omitempty"`
}

func (s *Server) handleGetRouter(w http.ResponseWriter, r *http.Request) {
	openai.WriteJSON(w, routerState{Policy: s.deps.Router.Policy(), Policies: s.deps.Router.Policies()})
}

func (s *Server) handlePutRouter(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Policy string `json:"policy"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, adminBodyLimit)).Decode(&in); err != nil {
		s.fail(w, badRequest("", "frontend: PUT /admin/router wants {\"policy\": \"<name>\"}: %v", err))
		return
	}
	if err := s.deps.Router.SetPolicy(in.Policy); err != nil {
		s.fail(w, badRequest("policy", "frontend: unknown policy %q: want one of %s", in.Policy, strings.Join(s.deps.Router.Policies(), ", ")))
		return
	}
	s.log.Info("routing policy changed", "policy", in.Policy)
	if s.cfg.SettingsChanged != nil {
		s.cfg.SettingsChanged()
	}
	openai.WriteJSON(w, routerState{Policy: s.deps.Router.Policy()})
}

// handleResetCache asks every worker to drop its prefix cache, in parallel.
func (s *Server) handleResetCache(w http.ResponseWriter, r *http.Request) {
	workers := s.deps.Workers.List()
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	for i, wk := range workers {
		wg.Go(func() { errs[i] = s.resetCache(r.Context(), wk) })
	}
	wg.Wait()
	var failed []string
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		s.fail(w, &apiError{status: http.StatusBadGateway, typ: openai.TypeServer, kind: errKindUpstreamStatus,
			msg: fmt.Sprintf("frontend: reset-cache failed on %d of %d workers: %s", len(failed), len(workers), strings.Join(failed, "; "))})
		return
	}
	openai.WriteJSON(w, map[string]int{"workers": len(workers)})
}

func (s *Server) resetCache(ctx context.Context, wk Worker) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.HeaderTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wk.URL+"/reset_prefix_cache", nil)
	if err != nil {
		return fmt.Errorf("%s: %w", wk.ID, err)
	}
	resp, err := s.client.Do(req) // with the worker key (workerAuth)
	if err != nil {
		return fmt.Errorf("%s: %w", wk.ID, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: status %d", wk.ID, resp.StatusCode)
	}
	return nil
}

type workerEvents struct {
	ID     string       `json:"id"`
	Role   string       `json:"role"`
	Known  bool         `json:"known"`
	Status *EventStatus `json:"events,omitempty"`
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	workers := s.deps.Workers.List()
	out := make([]workerEvents, 0, len(workers))
	for _, wk := range workers {
		we := workerEvents{ID: wk.ID, Role: wk.Role}
		if s.deps.Events != nil {
			if st, ok := s.deps.Events.EventStatus(wk.ID); ok {
				we.Known, we.Status = true, &st
			}
		}
		out = append(out, we)
	}
	openai.WriteJSON(w, map[string]any{"workers": out})
}

type lookupRequest struct {
	Prompt    *openai.Prompt   `json:"prompt"`
	Messages  []openai.Message `json:"messages"`
	CacheSalt string           `json:"cache_salt"`
	// Model, in a fleet, is the model whose tokenizer, block size and
	// (for an adapter) cache root the lookup uses; "" the frontend's own.
	Model string `json:"model,omitempty"`
}

type lookupResponse struct {
	Blocks    int            `json:"blocks"`
	BlockSize int            `json:"block_size"`
	Tokens    int            `json:"tokens"`
	Overlaps  map[string]int `json:"overlaps"`
}

// handleLookup tokenizes and hashes a prompt exactly as a request would be
// and reports each worker's prefix overlap in blocks.
func (s *Server) handleLookup(w http.ResponseWriter, r *http.Request) {
	if s.deps.Index == nil {
		s.fail(w, &apiError{status: http.StatusNotImplemented, typ: openai.TypeServer, kind: errKindRouter,
			msg: "frontend: no prefix index configured"})
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, adminBodyLimit))
	if err != nil {
		s.fail(w, badRequest("", "frontend: read lookup body: %v", err))
		return
	}
	var in lookupRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		s.fail(w, badRequest("", "frontend: lookup wants {\"prompt\": text|[ids]} or {\"messages\": [...]}, optional cache_salt: %v", err))
		return
	}
	tok, bs, salt := s.tok, s.cfg.BlockSize, in.CacheSalt
	if in.Model != "" {
		mr, aerr := s.resolveModel(s.deps.Workers.List(), in.Model)
		if aerr != nil {
			s.fail(w, aerr)
			return
		}
		tok, bs = mr.tok, mr.blockSize
		if mr.adapter != "" {
			salt = kvindex.LoRASalt(mr.adapter, salt)
		}
	}
	var toks []uint32
	switch {
	case len(in.Messages) > 0:
		var err error
		if toks, err = tok.EncodeChat(in.Messages, tokenizer.DefaultChat); err != nil {
			s.fail(w, badRequest("messages", "frontend: %v", err))
			return
		}
	case in.Prompt != nil && in.Prompt.IsTokens:
		toks = in.Prompt.Tokens
	case in.Prompt != nil:
		toks = tok.EncodePrompt(in.Prompt.Text)
	default:
		s.fail(w, badRequest("prompt", "frontend: lookup needs prompt or messages"))
		return
	}
	hashes := kvindex.HashChain(nil, salt, toks, bs)
	ov := s.deps.Index.Overlaps(hashes)
	if ov == nil {
		ov = map[string]int{}
	}
	openai.WriteJSON(w, lookupResponse{Blocks: len(hashes), BlockSize: bs, Tokens: len(toks), Overlaps: ov})
}

// handleCluster reports the bus and the frontend replicas this one shares
// routing state with.
func (s *Server) handleCluster(w http.ResponseWriter, r *http.Request) {
	if s.deps.Cluster == nil {
		openai.WriteJSON(w, map[string]any{"bus": map[string]any{"status": "unknown"}})
		return
	}
	openai.WriteJSON(w, s.deps.Cluster.ClusterStatus())
}
