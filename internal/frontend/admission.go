package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/admit"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Headers of admission: the client's priority, and the limit that refused
// a request.
const (
	HeaderPriority = "x-switchyard-priority"
	HeaderLimit    = "x-switchyard-limit"
)

// defaultCostTokens stands for the output of a request that sets no
// max_tokens, in its estimated cost: about a chat answer's length.
const defaultCostTokens = 256

// tenantOf authorises a /v1 request and names its tenant: the one whose
// key it presents, else the default tenant when the deployment's rule
// (apiAuthorized) admits it. With tenants configured and no API key, only
// tenant keys and the admin key are admitted.
func (s *Server) tenantOf(r *http.Request) (*admit.Tenant, bool) {
	ts := s.cfg.Tenants
	if ts == nil {
		return ts.Default(), s.apiAuthorized(r)
	}
	if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		if t := ts.ByKey(strings.TrimSpace(tok)); t != nil {
			return t, true
		}
	}
	if k := first(r.Header, canonAPIKey); k != "" { // Anthropic's clients
		if t := ts.ByKey(strings.TrimSpace(k)); t != nil {
			return t, true
		}
	}
	if s.cfg.APIKey == "" {
		return ts.Default(), s.cfg.AdminKey != "" && bearer(r, s.cfg.AdminKey)
	}
	return ts.Default(), s.apiAuthorized(r)
}

// applyTenant seeds pr's hash chain with the tenant's cache salt and
// sends that salt upstream, so neither the router's index nor the
// engine's prefix cache is shared across tenants.
func (s *Server) applyTenant(pr *parsedRequest, t *admit.Tenant) *apiError {
	salt, changed := t.CacheSalt(pr.req.CacheSalt)
	if !changed {
		return nil
	}
	body, err := rewriteBody(pr.body, map[string]json.RawMessage{"cache_salt": strconv.AppendQuote(nil, salt)})
	if err != nil {
		return badRequest("", "frontend: %v", err)
	}
	pr.body, pr.req.CacheSalt = body, salt
	if pr.model.adapter != "" {
		salt = kvindex.LoRASalt(pr.model.adapter, salt) // as readRequest roots an adapter's chain
	}
	pr.hashes = kvindex.HashChain(pr.hashes[:0], salt, pr.tokens, pr.model.blockSize)
	return nil
}

// admitRequest waits for admission of pr (see package admit). It returns a
// ticket to release when the request is done, or the error to answer.
func (s *Server) admitRequest(ctx context.Context, w http.ResponseWriter, r *http.Request, pr *parsedRequest, t *admit.Tenant) (*admit.Ticket, *apiError) {
	prio := admit.Standard
	if v := first(r.Header, canonPriority); v != "" {
		p, err := admit.ParsePriority(v)
		if err != nil {
			return nil, badRequest(HeaderPriority, "frontend: %s %q: want critical, standard or sheddable", HeaderPriority, v)
		}
		prio = p
	}
	out := pr.maxTokens()
	if out == 0 {
		out = defaultCostTokens
	}
	// The worker list parse took for this request stands for the fleet.
	var fleet admit.Fleet
	if pr.workers != nil {
		fleet = admit.Fleet{Known: true, Serving: s.anyServingIn(pr.workers), Capacity: s.capacityOf(pr.workers)}
	}
	tk, err := s.adm.Acquire(ctx, admit.Request{Tenant: t, Priority: prio, Cost: len(pr.tokens) + out, Fleet: fleet})
	if err == nil {
		tk.RateLimits.SetHeaders(w.Header())
		return tk, nil
	}
	var rej *admit.Rejection
	if !errors.As(err, &rej) {
		// The client left while queued: nothing to answer.
		return nil, &apiError{kind: errKindClientCanceled, status: 499}
	}
	rej.RateLimits.SetHeaders(w.Header())
	w.Header().Set(HeaderLimit, rej.Limit)
	if rej.Limit == admit.LimitUnavailable {
		return nil, s.unavailable(s.deps.Workers.List(), &pr.model)
	}
	s.m.shed.WithLabelValues("admission").Inc()
	return nil, &apiError{status: http.StatusTooManyRequests, typ: openai.TypeRateLimit, param: rej.Limit, msg: "frontend: " + rej.Msg,
		kind: errKindShed, retryAfter: strconv.Itoa(int(rej.RetryAfter.Seconds()))}
}

// capacity is how many requests admission may let through at once: the
// routable serving workers' --max-inflight-per-worker slots less those
// the peer replicas hold (-1 without that bound; 0 when no worker can
// serve or the peers hold every slot). A worker whose predicted prefill
// queue is over QueueTTFT has no slot. The slots of every model's workers
// are pooled: one queue serves the deployment.
func (s *Server) capacity() int { return s.capacityOf(s.deps.Workers.List()) }

// capacityOf is capacity over the workers all. One pass, no slices:
// admission asks on every request. A worker counts if it serves and is
// not ejected; when every serving worker is ejected, all of them count
// (as routable falls back to them all).
func (s *Server) capacityOf(all []Worker) int {
	var kept, every slots
	for i := range all {
		wk := &all[i]
		if !s.serves(wk) {
			continue
		}
		every.add(s, wk.ID)
		if !s.ejected(wk.ID) {
			kept.add(s, wk.ID)
		}
	}
	c := kept
	if c.workers == 0 {
		c = every
	}
	if c.unbounded {
		return -1
	}
	return c.n
}

// slots sums workers' admission slots for capacity.
type slots struct {
	n, workers int
	unbounded  bool // a worker without --max-inflight-per-worker
}

func (c *slots) add(s *Server, id string) {
	c.workers++
	switch {
	case s.overTTFT(id):
	case s.cfg.MaxInflightPerWorker <= 0:
		c.unbounded = true
	default:
		c.n += max(0, s.cfg.MaxInflightPerWorker-s.peerInFlight(id))
	}
}

// overTTFT reports whether worker id's predicted prefill queue is over
// QueueTTFT.
func (s *Server) overTTFT(id string) bool {
	if s.cfg.QueueTTFT <= 0 || s.deps.Queue == nil {
		return false
	}
	d, ok := s.deps.Queue.QueueDelay(id)
	return ok && d > s.cfg.QueueTTFT
}

// anyServing reports whether a worker can serve at all (admission's 503).
func (s *Server) anyServing() bool { return s.anyServingIn(s.deps.Workers.List()) }

func (s *Server) anyServingIn(all []Worker) bool {
	for i := range all {
		if s.serves(&all[i]) {
			return true
		}
	}
	return false
}

func (s *Server) peerInFlight(id string) int {
	if s.deps.Peers == nil {
		return 0
	}
	return s.deps.Peers.PeerInFlight(id)
}

// AdmissionStats reports the admission queue, for /health and the replicas.
func (s *Server) AdmissionStats() admit.Stats { return s.adm.Stats() }

// SetDraining starts (or ends) a drain: while draining, new completion
// requests get 503 with Retry-After (a load balancer sends them to
// another replica) and /health answers 503 with status "draining"; the
// requests being served carry on.
func (s *Server) SetDraining(on bool) { s.draining.Store(on) }

// Serving is how many completion requests are being served or queued.
func (s *Server) Serving() int64 { return s.serving.Load() }

// HealthDraining is /health's status while the frontend drains.
const HealthDraining = "draining"
