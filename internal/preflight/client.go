package preflight

import (
	"bytes"
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

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Headers of the frontend's debug and explanation contract.
const (
	headerPin     = "x-switchyard-pin-worker"
	headerWorker  = "x-switchyard-worker"
	headerPolicy  = "x-switchyard-policy"
	headerOverlap = "x-switchyard-overlap-tokens"
)

// client speaks to one frontend. It is used by one goroutine at a time.
type client struct {
	base     string
	apiKey   string
	adminKey string
	timeout  time.Duration
	model    string
	fleet    bool // model is one of a fleet's: lookups name it
	hc       *http.Client
}

func newClient(cfg *Config) *client {
	tr := &http.Transport{
		Proxy:              nil, // measure the deployment, not a proxy
		DialContext:        (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		DisableCompression: true,
		MaxIdleConns:       4,
		IdleConnTimeout:    30 * time.Second,
	}
	return &client{base: strings.TrimRight(cfg.URL, "/"), apiKey: cfg.APIKey, adminKey: cfg.adminKey(),
		timeout: cfg.Timeout, hc: &http.Client{Transport: tr}}
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// eventStatus is one worker of GET /admin/events.
type eventStatus struct {
	State          string   `json:"state"`
	Cause          string   `json:"cause"`
	Epoch          uint64   `json:"epoch"`
	LastSeq        uint64   `json:"last_seq"`
	LastEventAgeMs *float64 `json:"last_event_age_ms"`
	LastEventAgeS  *float64 `json:"last_event_age_s"`
	Batches        uint64   `json:"batches"`
	Blocks         uint64   `json:"blocks"`
	Gaps           uint64   `json:"gaps"`
	Resyncs        uint64   `json:"resyncs"`
	Malformed      uint64   `json:"malformed"`
}

// ageS is the last event's age in seconds, from whichever unit the frontend
// sent; -1 if it sent neither.
func (e eventStatus) ageS() float64 {
	switch {
	case e.LastEventAgeMs != nil:
		return *e.LastEventAgeMs / 1000
	case e.LastEventAgeS != nil:
		return *e.LastEventAgeS
	}
	return -1
}

// eventsWire decodes GET /admin/events: {"workers": {id: status}}. It also
// accepts a list of {"id", "events": status}, the shape of earlier frontends.
type eventsWire map[string]eventStatus

func (e *eventsWire) UnmarshalJSON(b []byte) error {
	var obj struct {
		Workers json.RawMessage `json:"workers"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	m := map[string]eventStatus{}
	if err := json.Unmarshal(obj.Workers, &m); err == nil {
		*e = m
		return nil
	}
	var list []struct {
		ID     string       `json:"id"`
		Events *eventStatus `json:"events"`
	}
	if err := json.Unmarshal(obj.Workers, &list); err != nil {
		return fmt.Errorf("workers is neither an object nor a list: %w", err)
	}
	for _, w := range list {
		if w.Events != nil {
			m[w.ID] = *w.Events
		}
	}
	*e = m
	return nil
}

type lookupWire struct {
	Blocks    int            `json:"blocks"`
	BlockSize int            `json:"block_size"`
	Overlaps  map[string]int `json:"overlaps"`
}

type linkWire struct {
	From        string  `json:"from"`
	To          string  `json:"to"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	RTTMs       float64 `json:"rtt_ms"`
	Measured    bool    `json:"measured"`
	Samples     int     `json:"samples"`
	Emulated    string  `json:"emulated"`
}

type disaggWire struct {
	Mode      string  `json:"mode"`
	Margin    float64 `json:"margin"`
	TTFTSLOMs float64 `json:"ttft_slo_ms"`
	ITLSLOMs  float64 `json:"itl_slo_ms"`
}

// predictWire is /admin/disagg/predict's answer. Its predictions have the
// report's shape; RemotePays is not on the wire (the frontend's gate does
// not know preflight's margin) and disaggPair fills it in.
type predictWire struct {
	Predictions []Prediction `json:"predictions"`
	Link        struct {
		BytesPerSec float64 `json:"bytes_per_sec"`
		RTTMs       float64 `json:"rtt_ms"`
	} `json:"link"`
}

// call does one JSON request and decodes a 2xx answer (or, with okStatus, that
// status too) into out.
func (c *client) call(ctx context.Context, method, path string, admin bool, body, out any, okStatus int) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("preflight: encode %s body: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("preflight: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.auth(req, admin)
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportError(method+" "+path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("preflight: %s %s: read body: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 && resp.StatusCode != okStatus {
		return httpError(method+" "+path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("preflight: %s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

func (c *client) auth(req *http.Request, admin bool) {
	key := c.apiKey
	if admin {
		key = c.adminKey
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
}

func (c *client) transportError(what string, err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("preflight: %s: timed out after %v (raise --timeout?): %w", what, c.timeout, err)
	}
	return fmt.Errorf("preflight: cannot reach %s: is `switchyard up` running? (%s: %w)", c.base, what, err)
}

// httpError turns a non-2xx answer into an error that says what to do.
// errNoEndpoint is a 404 from the frontend: it lacks the endpoint.
var errNoEndpoint = errors.New("this frontend lacks the endpoint; is --url a Switchyard frontend of this version?")

func httpError(what string, status int, body []byte) error {
	msg := strings.TrimSpace(string(body))
	var e openai.ErrorResponse
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	if len(msg) > 300 {
		msg = msg[:300]
	}
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		if !strings.Contains(what, "/admin/") && status == http.StatusUnauthorized {
			return fmt.Errorf("preflight: %s: HTTP %d (%s): the frontend refused the API key; pass --api-key (or set $SWITCHYARD_API_KEY) with the frontend's API key", what, status, msg)
		}
		return fmt.Errorf("preflight: %s: HTTP %d (%s): the frontend refused admin access; pass --admin-key (or set $SWITCHYARD_ADMIN_KEY) with the frontend's admin key", what, status, msg)
	case http.StatusNotFound:
		return fmt.Errorf("preflight: %s: HTTP 404: %w", what, errNoEndpoint)
	}
	return fmt.Errorf("preflight: %s: HTTP %d: %s", what, status, msg)
}

func (c *client) health(ctx context.Context) (Deployment, error) {
	var h struct {
		Deployment
		ID string `json:"id"` // an engine worker names itself; a frontend does not
	}
	// 503 means "unavailable" and still carries the body that says why.
	// With the admin key, so the report also carries worker addresses.
	if err := c.call(ctx, http.MethodGet, "/health", true, nil, &h, http.StatusServiceUnavailable); err != nil {
		return Deployment{}, err
	}
	if h.Model == "" && h.Policy == "" && h.Workers == nil {
		// Every frontend reports its model, policy and workers (possibly
		// none); checking anything else would report "0 workers" and
		// misleading PASSes.
		what := "its /health has no model, router policy or worker list"
		if h.ID != "" {
			what = fmt.Sprintf("it answers /health as engine worker %q does", h.ID)
		}
		return Deployment{}, fmt.Errorf("preflight: %s is not a Switchyard frontend: %s; point --url at the frontend (switchyard up prints its URL: \"Switchyard is ready: http://...\")", c.base, what)
	}
	return h.Deployment, nil
}

func (c *client) events(ctx context.Context) (eventsWire, error) {
	var e eventsWire
	err := c.call(ctx, http.MethodGet, "/admin/events", true, nil, &e, 0)
	return e, err
}

// lookupChat is lookup for a chat, tokenized as the frontend does.
func (c *client) lookupChat(ctx context.Context, messages []openai.Message) (lookupWire, error) {
	var l lookupWire
	err := c.call(ctx, http.MethodPost, "/admin/lookup", true, c.lookupBody("messages", messages), &l, 0)
	return l, err
}

// agreementWire is a worker's index agreement in /health.
type agreementWire struct {
	Requests        uint64 `json:"requests"`
	PredictedTokens uint64 `json:"predicted_tokens"`
	CachedTokens    uint64 `json:"engine_cached_tokens"`
	Blind           uint64 `json:"blind"`
	Stale           uint64 `json:"stale"`
	Pending         int    `json:"pending"`
	Inconsistent    bool   `json:"inconsistent"`
	Cause           string `json:"cause"`
}

// agreements reads each worker's index agreement from /health; a frontend
// that does not judge agreement has none.
func (c *client) agreements(ctx context.Context) (map[string]agreementWire, error) {
	var h struct {
		Workers []struct {
			ID        string         `json:"id"`
			Agreement *agreementWire `json:"agreement"`
		} `json:"workers"`
	}
	if err := c.call(ctx, http.MethodGet, "/health", true, nil, &h, http.StatusServiceUnavailable); err != nil {
		return nil, err
	}
	out := map[string]agreementWire{}
	for _, w := range h.Workers {
		if w.Agreement != nil {
			out[w.ID] = *w.Agreement
		}
	}
	return out, nil
}

func (c *client) lookup(ctx context.Context, prompt []uint32) (lookupWire, error) {
	var l lookupWire
	err := c.call(ctx, http.MethodPost, "/admin/lookup", true, c.lookupBody("prompt", prompt), &l, 0)
	return l, err
}

func (c *client) links(ctx context.Context) ([]linkWire, error) {
	var l struct {
		Links []linkWire `json:"links"`
	}
	err := c.call(ctx, http.MethodGet, "/admin/links", true, nil, &l, 0)
	return l.Links, err
}

func (c *client) probeLink(ctx context.Context, from, to string, n int64) (linkWire, error) {
	var l linkWire
	err := c.call(ctx, http.MethodPost, "/admin/links/probe", true, map[string]any{"from": from, "to": to, "bytes": n}, &l, 0)
	return l, err
}

func (c *client) disagg(ctx context.Context) (disaggWire, error) {
	var d disaggWire
	err := c.call(ctx, http.MethodGet, "/admin/disagg", true, nil, &d, 0)
	return d, err
}

func (c *client) predict(ctx context.Context, prefill, decode string, lengths []int) (predictWire, error) {
	var p predictWire
	err := c.call(ctx, http.MethodPost, "/admin/disagg/predict", true,
		map[string]any{"prompt_tokens": lengths, "prefill": prefill, "decode": decode}, &p, 0)
	if err == nil && len(p.Predictions) != len(lengths) {
		err = fmt.Errorf("preflight: POST /admin/disagg/predict: asked for %d lengths, got %d predictions", len(lengths), len(p.Predictions))
	}
	return p, err
}

// probe is what one streamed completion measured.
type probe struct {
	TTFTS        float64 // send to first non-empty text chunk, client-side
	PromptTokens int
	CachedTokens int
	Worker       string // x-switchyard-worker
	Policy       string // x-switchyard-policy
	Overlap      int    // x-switchyard-overlap-tokens, -1 if absent
	HasUsage     bool
	HasCached    bool            // the usage had prompt_tokens_details.cached_tokens
	KVTiers      *openai.KVTiers // usage's cached tokens by KV tier, from a worker with lower tiers
}

// complete sends prompt as a streamed completion, pinned to worker when pin
// is non-empty, and measures TTFT and the usage's cached tokens.
func (c *client) complete(ctx context.Context, prompt []uint32, pin string, maxTokens int) (probe, error) {
	return c.stream(ctx, "/v1/completions", map[string]any{
		"model": c.model, "prompt": prompt, "max_tokens": maxTokens, "ignore_eos": true,
		"stream": true, "stream_options": map[string]bool{"include_usage": true},
	}, pin)
}

// chat sends messages as a streamed chat completion, as complete does a
// prompt: the frontend and the engine each apply their own tokenizer and
// chat template to it.
func (c *client) chat(ctx context.Context, messages []openai.Message, pin string, maxTokens int) (probe, error) {
	return c.stream(ctx, "/v1/chat/completions", map[string]any{
		"model": c.model, "messages": messages, "max_tokens": maxTokens, "ignore_eos": true,
		"stream": true, "stream_options": map[string]bool{"include_usage": true},
	}, pin)
}

// stream posts a streaming request to path and measures it.
func (c *client) stream(ctx context.Context, path string, fields map[string]any, pin string) (probe, error) {
	p := probe{Overlap: -1}
	body, err := json.Marshal(fields)
	if err != nil {
		return p, fmt.Errorf("preflight: encode completion: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return p, fmt.Errorf("preflight: completion: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	what := "POST " + path
	if pin != "" {
		req.Header.Set(headerPin, pin)
		what += " pinned to " + pin
	}
	c.auth(req, pin != "")
	start := time.Now()
	resp, err := c.hc.Do(req)
	if err != nil {
		return p, c.transportError(what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return p, httpError(what, resp.StatusCode, b)
	}
	p.Worker, p.Policy = resp.Header.Get(headerWorker), resp.Header.Get(headerPolicy)
	if v, err := strconv.Atoi(resp.Header.Get(headerOverlap)); err == nil {
		p.Overlap = v
	}
	sr := openai.NewSSEReader(resp.Body)
	gotText := false
	for {
		payload, err := sr.Next()
		if errors.Is(err, openai.ErrStreamDone) {
			break
		}
		if err != nil {
			return p, fmt.Errorf("preflight: %s: stream ended without [DONE]: %w", what, err)
		}
		var chunk struct {
			Error   *openai.ErrorBody `json:"error"`
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *openai.Usage `json:"usage"`
		}
		if err := json.Unmarshal(payload, &chunk); err != nil {
			return p, fmt.Errorf("preflight: %s: bad chunk %.80q: %w", what, payload, err)
		}
		if chunk.Error != nil {
			return p, fmt.Errorf("preflight: %s: error in stream: %s", what, chunk.Error.Message)
		}
		if !gotText {
			for _, ch := range chunk.Choices {
				if ch.Text != "" || ch.Delta.Content != "" {
					p.TTFTS, gotText = time.Since(start).Seconds(), true
					break
				}
			}
		}
		if u := chunk.Usage; u != nil {
			p.HasUsage, p.PromptTokens = true, u.PromptTokens
			if u.PromptTokensDetails != nil {
				p.HasCached = true
				p.CachedTokens, p.KVTiers = u.PromptTokensDetails.CachedTokens, u.PromptTokensDetails.KVTiers
			}
		}
	}
	if !gotText {
		return p, fmt.Errorf("preflight: %s: stream carried no text, so no TTFT", what)
	}
	if !p.HasUsage {
		return p, fmt.Errorf("preflight: %s: no usage chunk; the frontend ignored stream_options.include_usage", what)
	}
	return p, nil
}

// lookupBody is an /admin/lookup body: key's value, and the model checked
// when the frontend serves several (its tokenizer and block size).
func (c *client) lookupBody(key string, v any) map[string]any {
	b := map[string]any{key: v}
	if c.fleet {
		b["model"] = c.model
	}
	return b
}

// FleetModels returns the base models of a frontend that serves several
// ([] when it serves one): preflight's checks run per model, with
// Config.Model naming each.
func FleetModels(ctx context.Context, cfg Config) ([]string, error) {
	c := newClient(&cfg)
	defer c.close()
	h, err := c.health(ctx)
	if err != nil {
		return nil, err
	}
	if h.Model != "" || len(h.Models) < 2 {
		return nil, nil
	}
	return h.Models, nil
}
