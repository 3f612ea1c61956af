package frontend

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Adapter is a LoRA adapter a worker serves on top of its Model.
type Adapter struct {
	Name string
	Root string // where the engine loaded it from; "" if not told
}

// ErrCodeModelNotFound is the error code of a request for a model no
// worker has ever registered, as OpenAI sends it.
const ErrCodeModelNotFound = "model_not_found"

// modelRoute is what a request's model name resolves to: the pool of
// workers whose Model is base, narrowed to those holding adapter when the
// name is a LoRA adapter's, and how that pool's prompts are tokenized and
// hashed.
type modelRoute struct {
	name      string // as the client sent it
	base      string // the workers' Model
	adapter   string // the LoRA adapter; "" for a base model or an alias
	blockSize int
	tok       Tokenizer
}

// serves reports whether wk may serve requests for mr (in any role).
func (mr *modelRoute) serves(wk *Worker) bool {
	if wk.Model != mr.base {
		return false
	}
	return mr.adapter == "" || slices.ContainsFunc(wk.Adapters, func(a Adapter) bool { return a.Name == mr.adapter })
}

// fleet reports whether the frontend serves every registered model, not
// one named by Config.Model.
func (s *Server) fleet() bool { return s.cfg.Model == "" }

// admits reports whether wk belongs to this frontend: every worker in a
// fleet, else the workers of Config.Model (the registry refuses the rest;
// the check keeps a Workers that does not filter honest).
func (s *Server) admits(wk *Worker) bool {
	return s.fleet() || wk.Model == s.cfg.Model || slices.Contains(wk.Aliases, s.cfg.Model)
}

// blockSize is the KV block size of base's workers.
func (s *Server) blockSize(base string) int {
	if bs, ok := s.cfg.BlockSizes[base]; ok {
		return bs
	}
	return s.cfg.BlockSize
}

// tokenizerFor is the tokenizer of base's prompts.
func (s *Server) tokenizerFor(base string) Tokenizer {
	if f := s.deps.ModelTokenizer; f != nil {
		if t := f(base); t != nil {
			return t
		}
	}
	return s.tok
}

// resolveModel finds what name is among workers: a base model, an alias
// or a LoRA adapter. A name no worker serves now but one did (or the one
// Config.Model names) resolves to its pool with no workers, so the request
// gets 503 from serve; a name never seen is 404 model_not_found.
func (s *Server) resolveModel(workers []Worker, name string) (modelRoute, *apiError) {
	mr := modelRoute{name: name}
	for i := range workers {
		wk := &workers[i]
		if !s.admits(wk) {
			continue
		}
		if wk.Model == name || slices.Contains(wk.Aliases, name) {
			mr.base = wk.Model
			break
		}
		if slices.ContainsFunc(wk.Adapters, func(a Adapter) bool { return a.Name == name }) {
			mr.base, mr.adapter = wk.Model, name
			break
		}
	}
	if mr.base != "" {
		if _, ok := s.known.Load(name); !ok {
			s.known.Store(name, mr)
		}
	} else if v, ok := s.known.Load(name); ok {
		mr = v.(modelRoute)
	} else if name == s.cfg.Model {
		mr.base = name
	} else {
		return mr, &apiError{status: http.StatusNotFound, typ: openai.TypeNotFound, param: "model", code: ErrCodeModelNotFound,
			msg: fmt.Sprintf("frontend: model %q is not served here; GET /v1/models lists the models served", name), kind: errKindBadRequest}
	}
	mr.blockSize = s.blockSize(mr.base)
	mr.tok = s.tokenizerFor(mr.base)
	return mr, nil
}

// handleModels serves GET /v1/models: every name the admitted workers
// serve, as vLLM lists them (adapters with parent set to their base).
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if !s.apiAuthorized(r) {
		s.m.errors.WithLabelValues(errKindUnauthorized).Inc()
		openai.WriteError(w, http.StatusUnauthorized, openai.TypeAuthentication, "", "frontend: missing or wrong API key: send Authorization: Bearer <key>")
		return
	}
	openai.WriteJSON(w, openai.ModelList{Object: "list", Data: s.models(s.deps.Workers.List())})
}

// handleModel serves GET /v1/models/{id}.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if !s.apiAuthorized(r) {
		s.m.errors.WithLabelValues(errKindUnauthorized).Inc()
		openai.WriteError(w, http.StatusUnauthorized, openai.TypeAuthentication, "", "frontend: missing or wrong API key: send Authorization: Bearer <key>")
		return
	}
	id := r.PathValue("id")
	for _, m := range s.models(s.deps.Workers.List()) {
		if m.ID == id {
			openai.WriteJSON(w, m)
			return
		}
	}
	s.fail(w, &apiError{status: http.StatusNotFound, typ: openai.TypeNotFound, param: "model", code: ErrCodeModelNotFound, kind: errKindBadRequest,
		msg: fmt.Sprintf("frontend: model %q is not served here; GET /v1/models lists the models served", id)})
}

// models lists what workers serve, sorted by id. A model's max_model_len is
// the smallest its workers report, so every worker can take what is
// advertised; created is when its earliest worker started (the frontend's
// start when none says).
func (s *Server) models(workers []Worker) []openai.Model {
	byID := map[string]*openai.Model{}
	add := func(id, root, parent string, wk *Worker) {
		m := byID[id]
		if m == nil {
			m = &openai.Model{ID: id, Object: "model", Created: s.started.Unix(), OwnedBy: "switchyard", Root: root}
			if parent != "" {
				m.Parent = &parent
			}
			if wk.Created > 0 {
				m.Created = wk.Created
			}
			byID[id] = m
		}
		if wk.Created > 0 && wk.Created < m.Created {
			m.Created = wk.Created
		}
		if wk.MaxModelLen > 0 && (m.MaxModelLen == 0 || wk.MaxModelLen < m.MaxModelLen) {
			m.MaxModelLen = wk.MaxModelLen
		}
	}
	for i := range workers {
		wk := &workers[i]
		if !s.admits(wk) {
			continue
		}
		add(wk.Model, wk.Model, "", wk)
		for _, a := range wk.Aliases {
			add(a, wk.Model, "", wk)
		}
		for _, a := range wk.Adapters {
			add(a.Name, a.Root, wk.Model, wk)
		}
	}
	if !s.fleet() && len(byID) == 0 {
		// The served model is listed even before a worker registers, as
		// a single-model frontend always has.
		byID[s.cfg.Model] = &openai.Model{ID: s.cfg.Model, Object: "model", Created: s.started.Unix(), OwnedBy: "switchyard", Root: s.cfg.Model}
	}
	out := make([]openai.Model, 0, len(byID))
	for _, m := range byID {
		if m.Root == "" {
			m.Root = m.ID
		}
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b openai.Model) int { return strings.Compare(a.ID, b.ID) })
	return out
}
