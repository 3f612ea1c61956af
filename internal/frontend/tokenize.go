package frontend

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// handleTokenize serves POST /tokenize in vLLM's shape: the token ids the
// frontend routes a prompt or chat by. `switchyard preflight`'s tokenizer
// check compares them with a worker's own /tokenize.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	if !s.apiAuthorized(r) {
		s.m.errors.WithLabelValues(errKindUnauthorized).Inc()
		openai.WriteError(w, http.StatusUnauthorized, openai.TypeAuthentication, "", "frontend: missing or wrong API key: send Authorization: Bearer <key>")
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		s.fail(w, badRequest("", "frontend: read tokenize body: %v", err))
		return
	}
	var req openai.TokenizeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		s.fail(w, badRequest("", "frontend: tokenize wants {\"prompt\": text} or {\"messages\": [...]}: %v", err))
		return
	}
	workers := s.deps.Workers.List()
	name := req.Model
	if name == "" {
		name = s.cfg.Model
	}
	tok, maxLen := s.tok, 0
	if name != "" {
		mr, aerr := s.resolveModel(workers, name)
		if aerr != nil {
			s.fail(w, aerr)
			return
		}
		tok = mr.tok
		for i := range workers {
			if wk := &workers[i]; mr.serves(wk) && wk.MaxModelLen > 0 && (maxLen == 0 || wk.MaxModelLen < maxLen) {
				maxLen = wk.MaxModelLen
			}
		}
	}
	toks, err := tokenizer.Tokenize(tok, &req)
	if err != nil {
		s.fail(w, badRequest("", "frontend: %v", err))
		return
	}
	resp := openai.TokenizeResponse{Count: len(toks), MaxModelLen: maxLen, Tokens: toks}
	if resp.Tokens == nil {
		resp.Tokens = []uint32{}
	}
	if req.ReturnTokenStrs {
		if d, ok := tok.(interface{ Decode([]uint32) string }); ok {
			for _, id := range toks {
				resp.TokenStrs = append(resp.TokenStrs, d.Decode([]uint32{id}))
			}
		}
	}
	openai.WriteJSON(w, resp)
}
