package frontend

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/internal/admit"
	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Health is the body of GET /health; its shape is documented in the package
// comment.
type Health struct {
	Status string `json:"status"` // ok, degraded, unavailable
	Reason string `json:"reason,omitempty"`
	// Model is the model served: Config.Model, or in a fleet the one base
	// model registered when there is one ("" when there are several).
	Model string `json:"model"`
	// Models are the base models the admitted workers serve, sorted.
	Models    []string `json:"models"`
	BlockSize int      `json:"block_size"`
	Policy    string   `json:"policy"`
	Disagg    string   `json:"disagg"`
	// Bus is "up", "down" (disconnected), "stalled" (connected, but the
	// server answers no round trip) or "jetstream unavailable" (the
	// registry's stream does not answer). While it is not up the frontend
	// routes to the last known workers that answer HTTP (fail static);
	// BusDownSeconds and BusCause say for how long and why.
	Bus            string         `json:"bus"`
	BusDownSeconds float64        `json:"bus_down_s,omitempty"`
	BusCause       string         `json:"bus_cause,omitempty"`
	Workers        []WorkerHealth `json:"workers"`
	// Admission is the admission queue: depth by priority, slots in use,
	// drain rate and decisions by outcome (shed, queue_timeout, ...).
	Admission admit.Stats `json:"admission"`
	Refused   []Refusal   `json:"refused"`
	// Links are the prefill → decode link estimates; present only when
	// there are prefill workers.
	Links []LinkInfo `json:"links,omitempty"`
}

// WorkerHealth is one worker in /health.
type WorkerHealth struct {
	ID    string `json:"id"`
	Role  string `json:"role"`
	Model string `json:"model"`
	URL   string `json:"url,omitempty"` // admin only
	// Ejected: the frontend stopped routing to the worker after connect
	// failures or a timeout, and probes it; EjectCause is the last failure.
	Ejected    bool   `json:"ejected,omitempty"`
	EjectCause string `json:"eject_cause,omitempty"`
	InFlight   int64  `json:"inflight"` // requests this frontend has open on it
	// Draining: the worker is shutting down; nothing new is routed to it.
	Draining bool         `json:"draining,omitempty"`
	Load     Load         `json:"load"`
	Events   *EventStatus `json:"events"`
	// Agreement is how the index's predicted cached prefixes compared
	// with what the worker's engine served (see StateInconsistent).
	Agreement *AgreementStatus `json:"agreement"`
	// Drift is the worker's bridge's drop counters, for a bridge.
	Drift *Drift `json:"drift,omitempty"`

	BlockSize       int    `json:"block_size,omitempty"`
	KVBlocks        int    `json:"kv_blocks,omitempty"` // KV cache capacity, in blocks of block_size tokens
	MaxModelLen     int    `json:"max_model_len,omitempty"`
	KVBytesPerToken int64  `json:"kv_bytes_per_token,omitempty"`
	KVXferAddr      string `json:"kvxfer_addr,omitempty"` // admin only
	Profile         any    `json:"profile,omitempty"`
}

// Health statuses.
const (
	HealthOK          = "ok"
	HealthDegraded    = "degraded"
	HealthUnavailable = "unavailable"
)

// Health reports the state of the deployment as /health serves it.
func (s *Server) Health() Health {
	workers := s.deps.Workers.List()
	h := Health{
		Status: HealthOK, Model: s.cfg.Model, BlockSize: s.cfg.BlockSize,
		Policy: s.deps.Router.Policy(), Disagg: s.DisaggMode(),
		Workers: make([]WorkerHealth, 0, len(workers)),
		Refused: s.deps.Workers.Refused(),
	}
	if h.Refused == nil {
		h.Refused = []Refusal{}
	}
	var unhealthy []string
	h.Models = []string{}
	for i := range workers {
		if wk := &workers[i]; s.admits(wk) && !slices.Contains(h.Models, wk.Model) {
			h.Models = append(h.Models, wk.Model)
		}
	}
	slices.Sort(h.Models)
	if s.fleet() && len(h.Models) == 1 {
		h.Model = h.Models[0]
	}
	if s.fleet() {
		// A model that was served and has lost every worker degrades the
		// fleet: its requests get 503 while the others are served.
		var gone []string
		s.known.Range(func(_, v any) bool {
			if mr := v.(modelRoute); mr.adapter == "" && !slices.Contains(gone, mr.base) && len(s.servingWorkers(workers, &mr)) == 0 {
				gone = append(gone, mr.base)
			}
			return true
		})
		slices.Sort(gone)
		for _, m := range gone {
			unhealthy = append(unhealthy, fmt.Sprintf("model %q has no aggregated or decode worker", m))
		}
	}
	h.Bus = "up"
	if s.deps.Bus != nil {
		if b := s.deps.Bus.BusStatus(); b.Down {
			h.Bus, h.BusCause = cmp.Or(b.State, "down"), b.Cause
			h.BusDownSeconds = time.Since(b.Since).Seconds()
			unhealthy = append(unhealthy, fmt.Sprintf("bus %s for %.1fs (%s): routing to the last known workers", h.Bus, h.BusDownSeconds, b.Cause))
		}
	}
	for _, wk := range workers {
		wh := WorkerHealth{ID: wk.ID, Role: wk.Role, Model: wk.Model, URL: wk.URL, Load: wk.Load,
			InFlight: s.inflightCounter(wk.ID).Load(), Draining: wk.Draining, BlockSize: wk.BlockSize, KVBlocks: wk.KVBlocks, MaxModelLen: wk.MaxModelLen, KVBytesPerToken: wk.KVBytesPerToken,
			KVXferAddr: wk.KVXferAddr, Profile: wk.Profile}
		st := EventStatus{State: "unknown", Cause: "no event consumer reports this worker"}
		if s.deps.Events != nil {
			if got, ok := s.deps.Events.EventStatus(wk.ID); ok {
				st = got
			}
		}
		s.noteDrift(wk)
		ag := s.workerState(wk.ID).agree.status()
		if bad, cause := s.inconsistent(wk.ID); bad && st.State == StateHealthy {
			// The events flow, but what they built disagrees with the
			// engine (or the bridge drops them): a worse state than
			// healthy, a better one than the others (which already route
			// by the approximate index).
			st.State, st.Cause = StateInconsistent, cause
		}
		wh.Events, wh.Agreement, wh.Drift = &st, &ag, wk.Drift
		if wh.Ejected, wh.EjectCause = s.ejection(wk.ID); wh.Ejected {
			unhealthy = append(unhealthy, fmt.Sprintf("%s ejected: %s", wk.ID, wh.EjectCause))
		}
		if st.State != StateHealthy {
			unhealthy = append(unhealthy, fmt.Sprintf("%s events %s", wk.ID, st.State))
		}
		h.Workers = append(h.Workers, wh)
	}
	for _, r := range h.Refused {
		// A refused worker is capacity the operator meant to have.
		unhealthy = append(unhealthy, fmt.Sprintf("%s refused: %s", r.ID, r.Reason))
	}
	if slices.ContainsFunc(workers, func(wk Worker) bool { return wk.Role == RolePrefill }) {
		h.Links = s.linkInfos(workers)
	}
	h.Admission = s.adm.Stats()
	if s.draining.Load() {
		h.Status, h.Reason = HealthDraining, fmt.Sprintf("shutting down: finishing %d requests, taking none", s.serving.Load())
	} else if reason := s.unavailableReason(workers, nil); reason != "" {
		h.Status, h.Reason = HealthUnavailable, reason
	} else if len(unhealthy) > 0 {
		h.Status, h.Reason = HealthDegraded, strings.Join(unhealthy, "; ")
	}
	return h
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	h := s.Health()
	if !s.adminAuthorized(r) {
		// Worker addresses are a map for whoever wants to reach the
		// workers directly; /health is open to load balancers.
		for i := range h.Workers {
			h.Workers[i].URL, h.Workers[i].KVXferAddr = "", ""
		}
	}
	if h.Status == HealthUnavailable || h.Status == HealthDraining {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	openai.WriteJSON(w, h)
}
