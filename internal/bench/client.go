package bench

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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Outcomes of a request.
const (
	OutcomeOK       = "ok"
	OutcomeRejected = "rejected" // HTTP 429 or 503: the deployment shed load
	OutcomeError    = "error"
)

// Record is what one request did. Durations are seconds. Fields from
// response headers are empty or nil when the header was absent.
type Record struct {
	Index        int     `json:"index"`
	Warmup       bool    `json:"warmup,omitempty"`
	Group        string  `json:"group,omitempty"`
	StartS       float64 `json:"start_s"` // send time from the run's start
	InputTokens  int     `json:"input_tokens"`
	SharedTokens int     `json:"shared_tokens"`
	MaxTokens    int     `json:"max_tokens"`

	Status    int    `json:"status"` // HTTP status, 0 on transport errors
	Outcome   string `json:"outcome"`
	ErrorKind string `json:"error_kind,omitempty"`
	ErrorMsg  string `json:"error,omitempty"`

	TTFTS    float64 `json:"ttft_s"`
	ITLMeanS float64 `json:"itl_mean_s"`
	ITLMaxS  float64 `json:"itl_max_s"`
	E2ES     float64 `json:"e2e_s"`
	Chunks   int     `json:"content_chunks"`

	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// CachedTokens is the prompt tokens served from the worker's own cache:
	// usage cached_tokens less TransferredTokens, which a decode worker
	// counts as cached but a remote prefill computed and sent.
	CachedTokens int `json:"cached_tokens"`
	// TransferredTokens is the KV a decode worker pulled from a remote
	// prefill, from x-switchyard-kv-bytes and the worker's
	// kv_bytes_per_token (0 when either is unknown).
	TransferredTokens int `json:"transferred_tokens"`
	// KVBytes is x-switchyard-kv-bytes: 0 for a local prefill, the bytes
	// pulled for a remote one; nil when absent.
	KVBytes  *int64 `json:"kv_bytes,omitempty"`
	CacheHit bool   `json:"cache_hit"` // cached >= the shared prefix's full blocks (routing only)
	// KVTiers splits CachedTokens by KV tier, from a worker with lower
	// tiers (usage.prompt_tokens_details.switchyard_kv_tiers).
	KVTiers *openai.KVTiers `json:"kv_tiers,omitempty"`

	Frontend        string   `json:"frontend,omitempty"` // the URL it was sent to, with several --url
	Worker          string   `json:"worker,omitempty"`
	OverlapTokens   *int     `json:"overlap_tokens,omitempty"`
	Policy          string   `json:"policy,omitempty"`
	Prefill         string   `json:"prefill,omitempty"`
	DisaggReason    string   `json:"disagg_reason,omitempty"`
	PredictedTTFTMs *float64 `json:"predicted_ttft_ms,omitempty"`

	itls        []float64 // every inter-token gap, for the aggregate ITL percentiles
	HitEligible bool      `json:"cache_hit_eligible"` // shared prefix has at least one full block
}

// Response headers the frontend sets on every request.
const (
	HeaderWorker        = "X-Switchyard-Worker"
	HeaderOverlapTokens = "X-Switchyard-Overlap-Tokens"
	HeaderPolicy        = "X-Switchyard-Policy"
	HeaderPrefill       = "X-Switchyard-Prefill"
	HeaderDisaggReason  = "X-Switchyard-Disagg-Reason"
	HeaderPredictedTTFT = "X-Switchyard-Predicted-Ttft-Ms"
	HeaderKVBytes       = "X-Switchyard-Kv-Bytes"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	URL      string // one frontend, or several separated by commas: requests are spread over them
	APIKey   string
	AdminKey string
	MaxConns int           // idle connections kept per host; at least the concurrency
	Timeout  time.Duration // per request
	// API is the endpoint requests go to: APICompletions (the default,
	// prompts as token IDs), APIChat, APIMessages or APIResponses (prompts
	// as the text the token IDs decode to).
	API string
}

// Client sends streamed completions and admin calls to one frontend. It is
// safe for concurrent use; Close releases its idle connections.
type Client struct {
	base     string   // the first URL: control requests
	bases    []string // every URL: requests go round-robin over the ones up
	down     []atomic.Bool
	apiKey   string
	adminKey string
	timeout  time.Duration
	hc       *http.Client
	tr       *http.Transport
	model    []byte    // JSON-encoded model name
	mix      *modelMix // several models: each request draws one; nil: model
	bufs     sync.Pool
	api      string
}

// NewClient returns a client with its own transport, sized for cfg.MaxConns
// concurrent streams.
func NewClient(cfg ClientConfig) *Client {
	tr := &http.Transport{
		Proxy:               nil, // a benchmark must measure the deployment, not a proxy
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        max(cfg.MaxConns, 16) * 2,
		MaxIdleConnsPerHost: max(cfg.MaxConns, 16) * 2,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	bases := splitURLs(cfg.URL)
	if len(bases) == 0 {
		bases = []string{""}
	}
	c := &Client{base: bases[0], bases: bases, down: make([]atomic.Bool, len(bases)), apiKey: cfg.APIKey, adminKey: cfg.AdminKey, timeout: cfg.Timeout,
		hc: &http.Client{Transport: tr}, tr: tr, api: cmp.Or(cfg.API, APICompletions)}
	c.SetModel("")
	return c
}

// Close drops idle connections.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// SetModel sets the model name sent with every completion, or a mix of
// models ("a:0.7,b:0.3", see ParseModelMix) each request draws from. Call
// it before the first Complete.
func (c *Client) SetModel(m string) {
	c.model, _ = json.Marshal(m)
	c.mix = nil
	if names, weights, ok := ParseModelMix(m); ok {
		c.mix = newModelMix(names, weights)
	}
}

// modelJSON is the JSON-encoded model of the next request.
func (c *Client) modelJSON() []byte {
	if c.mix != nil {
		return c.mix.next()
	}
	return c.model
}

type reqBuf struct {
	body   []byte
	tokens []uint32
}

// appendBody writes the completions request body by hand: the prompt can be
// 100k token IDs and encoding/json would reflect over every one.
func (c *Client) appendBody(dst []byte, prompt []uint32, maxTokens int) []byte {
	dst = append(dst, `{"model":`...)
	dst = append(dst, c.modelJSON()...)
	dst = append(dst, `,"prompt":[`...)
	for i, t := range prompt {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(t), 10)
	}
	dst = append(dst, `],"max_tokens":`...)
	dst = strconv.AppendInt(dst, int64(maxTokens), 10)
	dst = append(dst, `,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`...)
	return dst
}

// Complete sends item's prompt as a streamed completion and fills rec. It
// never returns an error: every failure is recorded in rec by kind.
func (c *Client) Complete(ctx context.Context, b *PromptBuilder, it *Item, rec *Record) {
	rb, _ := c.bufs.Get().(*reqBuf)
	if rb == nil {
		rb = &reqBuf{}
	}
	defer c.bufs.Put(rb)
	rb.tokens = it.AppendPrompt(b, rb.tokens[:0])
	if c.api == APICompletions {
		rb.body = c.appendBody(rb.body[:0], rb.tokens, it.MaxTokens)
	} else {
		rb.body = c.appendTextBody(rb.body[:0], rb.tokens, it.MaxTokens)
	}

	rec.Index, rec.Group, rec.InputTokens, rec.SharedTokens, rec.MaxTokens = it.Index, it.Group, len(rb.tokens), it.SharedTokens, it.MaxTokens
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	var resp *http.Response
	var err error
	for try := 0; try < len(c.bases); try++ {
		i := c.pickBase(it.Index + try)
		rec.Frontend = ""
		if len(c.bases) > 1 {
			rec.Frontend = c.bases[i]
		}
		var req *http.Request
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, c.bases[i]+apiPaths[c.api], bytes.NewReader(rb.body))
		if err != nil {
			rec.fail(0, "request", err.Error())
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		if len(c.bases) > 1 {
			// Lets the transport resend a request whose pooled connection
			// the frontend had closed before reading it (as it does when it
			// dies); a frontend that never saw it cannot have run it.
			req.Header.Set("Idempotency-Key", strconv.Itoa(it.Index))
		}
		if c.apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+c.apiKey)
		}
		resp, err = c.hc.Do(req)
		if err == nil || len(c.bases) == 1 || ctx.Err() != nil || !errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
		// Nothing listens there any more: as a load balancer would, take
		// it out and send the request to the next frontend.
		c.down[i].Store(true)
	}
	if err != nil {
		rec.E2ES = time.Since(start).Seconds()
		rec.fail(0, transportKind(ctx, err), err.Error())
		return
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	rec.headers(resp.Header)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := errorMessage(resp.Body)
		rec.E2ES = time.Since(start).Seconds()
		rec.fail(resp.StatusCode, "http_"+strconv.Itoa(resp.StatusCode), msg)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			rec.Outcome = OutcomeRejected
		}
		return
	}
	c.readStream(ctx, resp.Body, start, rec)
}

// pickBase returns the index of the i-th frontend round-robin, skipping
// those found down (all down: the i-th anyway).
func (c *Client) pickBase(i int) int {
	n := len(c.bases)
	for k := 0; k < n; k++ {
		j := (i + k) % n
		if !c.down[j].Load() {
			return j
		}
	}
	return i % n
}

// splitURLs splits --url's comma-separated list, trimming trailing slashes.
func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			out = append(out, u)
		}
	}
	return out
}

func (c *Client) readStream(ctx context.Context, body io.Reader, start time.Time, rec *Record) {
	sr := openai.NewSSEReader(body)
	var last time.Time
	var sum float64
	rec.itls = rec.itls[:0]
	for {
		payload, err := sr.Next()
		now := time.Now()
		if err == nil && c.api != APICompletions && c.api != APIChat && openai.StreamEnd(payload) {
			c.usage(payload, rec) // the last event of these APIs carries the usage
			err = openai.ErrStreamDone
		}
		if errors.Is(err, openai.ErrStreamDone) {
			rec.E2ES = now.Sub(start).Seconds()
			break
		}
		if err != nil {
			rec.E2ES = now.Sub(start).Seconds()
			kind := "truncated"
			if ctx.Err() != nil {
				kind = transportKind(ctx, err)
			}
			rec.fail(rec.Status, kind, "stream ended without [DONE]: "+err.Error())
			return
		}
		if v, ok := jsonValue(payload, "error"); ok && len(v) > 0 && v[0] == '{' {
			var e struct {
				Error openai.ErrorBody `json:"error"`
			}
			_ = json.Unmarshal(payload, &e)
			kind := e.Error.Type
			if kind == "" {
				kind = "unknown"
			}
			rec.E2ES = now.Sub(start).Seconds()
			rec.fail(rec.Status, "stream_"+kind, e.Error.Message)
			return
		}
		if c.api == APIResponses && bytes.Contains(payload, []byte(`"type":"error"`)) {
			var e struct{ Code, Message string }
			_ = json.Unmarshal(payload, &e)
			rec.E2ES = now.Sub(start).Seconds()
			rec.fail(rec.Status, "stream_"+cmp.Or(e.Code, "unknown"), e.Message)
			return
		}
		if c.hasText(payload) {
			if rec.Chunks == 0 {
				rec.TTFTS = now.Sub(start).Seconds()
			} else {
				g := now.Sub(last).Seconds()
				rec.itls = append(rec.itls, g)
				sum += g
				rec.ITLMaxS = max(rec.ITLMaxS, g)
			}
			last = now
			rec.Chunks++
		}
		if c.api == APIMessages && bytes.Contains(payload, []byte(`"message_delta"`)) {
			messageUsage(payload, rec)
		}
		if c.api == APICompletions || c.api == APIChat {
			if v, ok := jsonValue(payload, "usage"); ok && len(v) > 0 && v[0] == '{' {
				var u struct {
					Usage openai.Usage `json:"usage"`
				}
				if err := json.Unmarshal(payload, &u); err != nil {
					rec.fail(rec.Status, "bad_usage", "usage chunk: "+err.Error())
					return
				}
				rec.PromptTokens, rec.CompletionTokens = u.Usage.PromptTokens, u.Usage.CompletionTokens
				if d := u.Usage.PromptTokensDetails; d != nil {
					rec.CachedTokens, rec.KVTiers = d.CachedTokens, d.KVTiers
				}
			}
		}
	}
	if len(rec.itls) > 0 {
		rec.ITLMeanS = sum / float64(len(rec.itls))
	}
	if rec.Chunks == 0 {
		rec.fail(rec.Status, "empty_stream", "stream finished without any text")
		return
	}
	rec.Outcome = OutcomeOK
}

// SetITLs sets the record's inter-token gaps (seconds), their mean and max:
// for reports whose requests were not measured from a stream
// (switchyard simulate).
func (r *Record) SetITLs(gaps []float64) {
	r.itls = gaps
	r.ITLMeanS, r.ITLMaxS = 0, 0
	var sum float64
	for _, g := range gaps {
		sum += g
		r.ITLMaxS = max(r.ITLMaxS, g)
	}
	if len(gaps) > 0 {
		r.ITLMeanS = sum / float64(len(gaps))
	}
}

func (r *Record) fail(status int, kind, msg string) {
	r.Status, r.Outcome, r.ErrorKind = status, OutcomeError, kind
	if len(msg) > 300 {
		msg = msg[:300]
	}
	r.ErrorMsg = msg
}

func (r *Record) headers(h http.Header) {
	r.Worker = h.Get(HeaderWorker)
	r.Policy = h.Get(HeaderPolicy)
	r.Prefill = h.Get(HeaderPrefill)
	r.DisaggReason = h.Get(HeaderDisaggReason)
	if v, err := strconv.Atoi(h.Get(HeaderOverlapTokens)); err == nil {
		r.OverlapTokens = &v
	}
	if v, err := strconv.ParseFloat(h.Get(HeaderPredictedTTFT), 64); err == nil {
		r.PredictedTTFTMs = &v
	}
	if v, err := strconv.ParseInt(h.Get(HeaderKVBytes), 10, 64); err == nil && v >= 0 {
		r.KVBytes = &v
	}
}

func transportKind(ctx context.Context, err error) string {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return "timeout"
	case ctx.Err() != nil:
		return "canceled"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	return "transport"
}

// errorMessage reads an OpenAI error envelope (or the first bytes of any
// other body) for the record.
func errorMessage(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 4<<10))
	var e openai.ErrorResponse
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	return string(bytes.TrimSpace(b))
}

// hasText reports whether a chunk carries non-empty generated text: a
// completions "text" or a chat "content" whose string value is not "".
func hasText(payload []byte) bool {
	for _, key := range [...]string{"text", "content"} {
		if v, ok := jsonValue(payload, key); ok && len(v) >= 2 && v[0] == '"' && v[1] != '"' {
			return true
		}
	}
	return false
}

// jsonValue finds the first object key named key in a JSON payload and
// returns the bytes from its value onwards. It is a cheap scan, not a
// parser: it skips string contents (honouring escapes), so text that merely
// contains "key" inside a value never matches, and it only accepts a string
// that is followed by a colon, i.e. an object key.
func jsonValue(payload []byte, key string) ([]byte, bool) {
	for i := 0; i < len(payload); i++ {
		if payload[i] != '"' {
			continue
		}
		// Scan the string starting at i.
		j := i + 1
		for j < len(payload) && payload[j] != '"' {
			if payload[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(payload) {
			return nil, false
		}
		s := payload[i+1 : j]
		k := j + 1
		for k < len(payload) && isSpace(payload[k]) {
			k++
		}
		if k < len(payload) && payload[k] == ':' && string(s) == key {
			k++
			for k < len(payload) && isSpace(payload[k]) {
				k++
			}
			return payload[k:], true
		}
		i = j
	}
	return nil, false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// errAdmin formats an admin-endpoint failure with what to do about it.
func errAdmin(what string, status int, body string) error {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		if !strings.Contains(what, "/admin/") {
			return fmt.Errorf("bench: %s: HTTP %d: the frontend refused the API key; pass --api-key (or set $SWITCHYARD_API_KEY) with the frontend's API key", what, status)
		}
		return fmt.Errorf("bench: %s: HTTP %d: the frontend refused the admin key; pass --admin-key (or set $SWITCHYARD_ADMIN_KEY) with the frontend's admin key", what, status)
	case http.StatusNotFound:
		return fmt.Errorf("bench: %s: HTTP 404: this frontend has no admin API; run without --compare-policies/--reset-cache, or point --url at a Switchyard frontend", what)
	}
	return fmt.Errorf("bench: %s: HTTP %d: %s", what, status, body)
}
