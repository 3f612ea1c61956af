package sim

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/switchyard-llm/switchyard/internal/openai"
	"github.com/switchyard-llm/switchyard/internal/tokenizer"
)

// tokenizeBodyLimit bounds a POST /tokenize body.
const tokenizeBodyLimit = 32 << 20

// serveTokenize is vLLM's POST /tokenize: {prompt} or {messages} to
// {count, max_model_len, tokens}, with the worker's tokenizer and chat
// template, so a frontend can be checked against it.
func (w *Worker) serveTokenize(rw http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, tokenizeBodyLimit))
	if err != nil {
		openai.WriteError(rw, http.StatusBadRequest, openai.TypeInvalidRequest, "", "read body: "+err.Error())
		return
	}
	var req openai.TokenizeRequest
	if err := json.Unmarshal(data, &req); err != nil {
		openai.WriteError(rw, http.StatusBadRequest, openai.TypeInvalidRequest, "", "tokenize wants {\"prompt\": text} or {\"messages\": [...]}: "+err.Error())
		return
	}
	if _, ok := w.resolveModel(req.Model); !ok {
		openai.WriteError(rw, http.StatusNotFound, openai.TypeNotFound, "model", "model "+req.Model+" does not exist; this worker serves "+w.servedName())
		return
	}
	toks, err := tokenizer.Tokenize(w.tok, &req)
	if err != nil {
		openai.WriteError(rw, http.StatusBadRequest, openai.TypeInvalidRequest, "", err.Error())
		return
	}
	resp := openai.TokenizeResponse{Count: len(toks), MaxModelLen: w.maxLen, Tokens: toks}
	if resp.Tokens == nil {
		resp.Tokens = []uint32{}
	}
	if req.ReturnTokenStrs {
		for _, id := range toks {
			resp.TokenStrs = append(resp.TokenStrs, w.tok.Decode([]uint32{id}))
		}
	}
	openai.WriteJSON(rw, resp)
}
