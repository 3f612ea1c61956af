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
	if req.Model != "" && req.Model != s.cfg.Model {
		s.fail(w, &apiError{status: http.StatusNotFound, typ: openai.TypeNotFound, param: "model", kind: errKindBadRequest,
			msg: "frontend: model " + req.Model + " is not served here; this deployment serves " + s.cfg.Model})
		return
	}
	toks, err := tokenizer.Tokenize(s.tok, &req)
	if err != nil {
		s.fail(w, badRequest("", "frontend: %v", err))
		return
	}
	maxLen := 0
	for _, wk := range s.deps.Workers.List() {
		if wk.Model == s.cfg.Model && wk.MaxModelLen > 0 && (maxLen == 0 || wk.MaxModelLen < maxLen) {
			maxLen = wk.MaxModelLen
		}
	}
	resp := openai.TokenizeResponse{Count: len(toks), MaxModelLen: maxLen, Tokens: toks}
	if resp.Tokens == nil {
		resp.Tokens = []uint32{}
	}
	if req.ReturnTokenStrs {
		if d, ok := s.tok.(interface{ Decode([]uint32) string }); ok {
			for _, id := range toks {
				resp.TokenStrs = append(resp.TokenStrs, d.Decode([]uint32{id}))
			}
		}
	}
	openai.WriteJSON(w, resp)
}
