package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Health is the part of GET /health bench reads.
type Health struct {
	Status    string         `json:"status"`
	Model     string         `json:"model,omitempty"`
	Policy    string         `json:"policy,omitempty"`
	ID        string         `json:"id,omitempty"` // set by an engine worker, never by a frontend
	BlockSize int            `json:"block_size,omitempty"`
	Workers   []HealthWorker `json:"workers,omitempty"`
}

// HealthWorker is one worker of GET /health.
type HealthWorker struct {
	ID   string `json:"id"`
	Role string `json:"role,omitempty"`
	// KVBlocks is the worker's KV cache capacity in blocks of BlockSize
	// tokens; 0 when the frontend does not report it.
	KVBlocks  int `json:"kv_blocks,omitempty"`
	BlockSize int `json:"block_size,omitempty"`
	// KVBytesPerToken converts the KV bytes a decode worker pulled into
	// tokens (Record.TransferredTokens); 0 when not reported.
	KVBytesPerToken int64 `json:"kv_bytes_per_token,omitempty"`
	// Profile is the timing profile a simulated worker registered; nil
	// for engines that register none.
	Profile *bus.Profile `json:"profile,omitempty"`
	Events  struct {
		State string `json:"state,omitempty"`
	} `json:"events"`
}

// RouterState is the body of GET /admin/router.
type RouterState struct {
	Policy   string   `json:"policy"`
	Policies []string `json:"policies"`
}

// call does one JSON control request and decodes a 2xx answer into out
// (when out is non-nil). It returns the raw body too.
func (c *Client) call(ctx context.Context, method, path, key string, body any, out any) ([]byte, error) {
	return c.callAt(ctx, c.base, method, path, key, body, out)
}

// callAll does call on every frontend URL: settings go to each, so that
// replicas that do not share them (--share-state=false) agree too.
func (c *Client) callAll(ctx context.Context, method, path, key string, body any, out any) ([]byte, error) {
	var b []byte
	for _, base := range c.bases {
		var err error
		if b, err = c.callAt(ctx, base, method, path, key, body, out); err != nil {
			return b, err
		}
	}
	return b, nil
}

func (c *Client) callAt(ctx context.Context, base, method, path, key string, body any, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("bench: encode %s body: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, min(c.timeout, adminTimeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("bench: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: %s %s: %w (is the frontend running at --url %s?)", method, path, err, base)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("bench: %s %s: read body: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return b, errAdmin(method+" "+path, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return b, fmt.Errorf("bench: %s %s: decode: %w", method, path, err)
		}
	}
	return b, nil
}

// adminTimeout bounds each control call; they are cheap on any healthy frontend.
const adminTimeout = 30 * time.Second

// Health fetches GET /health. A body that is not JSON (a plain engine's
// health check) yields Status "unknown" and no error.
func (c *Client) Health(ctx context.Context) (Health, error) {
	b, err := c.call(ctx, http.MethodGet, "/health", c.apiKey, nil, nil)
	if err != nil {
		return Health{}, err
	}
	var h Health
	if json.Unmarshal(b, &h) != nil {
		return Health{Status: "unknown"}, nil
	}
	return h, nil
}

// Models returns the ids of GET /v1/models.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	var ml openai.ModelList
	if _, err := c.call(ctx, http.MethodGet, "/v1/models", c.apiKey, nil, &ml); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(ml.Data))
	for _, m := range ml.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

// Router returns the frontend's current and available routing policies.
func (c *Client) Router(ctx context.Context) (RouterState, error) {
	var s RouterState
	_, err := c.call(ctx, http.MethodGet, "/admin/router", c.adminKey, nil, &s)
	return s, err
}

// SetPolicy switches the frontend's routing policy and checks the answer.
func (c *Client) SetPolicy(ctx context.Context, policy string) error {
	var s RouterState
	if _, err := c.callAll(ctx, http.MethodPut, "/admin/router", c.adminKey, map[string]string{"policy": policy}, &s); err != nil {
		return err
	}
	if s.Policy != policy {
		return fmt.Errorf("bench: PUT /admin/router: asked for policy %q, frontend answered %q", policy, s.Policy)
	}
	return nil
}

// ResetCache clears every worker's prefix cache and returns how many workers
// did it.
func (c *Client) ResetCache(ctx context.Context) (int, error) {
	var r struct {
		Workers int `json:"workers"`
	}
	_, err := c.call(ctx, http.MethodPost, "/admin/reset-cache", c.adminKey, nil, &r)
	return r.Workers, err
}

// DisaggState is the body of GET and PUT /admin/disagg.
type DisaggState struct {
	Mode string `json:"mode"`
}

// Disagg returns the frontend's disaggregation mode.
func (c *Client) Disagg(ctx context.Context) (DisaggState, error) {
	var s DisaggState
	_, err := c.call(ctx, http.MethodGet, "/admin/disagg", c.adminKey, nil, &s)
	return s, err
}

// SetDisagg switches the frontend's disaggregation mode and checks the answer.
func (c *Client) SetDisagg(ctx context.Context, mode string) error {
	var s DisaggState
	if _, err := c.callAll(ctx, http.MethodPut, "/admin/disagg", c.adminKey, map[string]string{"mode": mode}, &s); err != nil {
		return err
	}
	if s.Mode != mode {
		return fmt.Errorf("bench: PUT /admin/disagg: asked for mode %q, frontend answered %q", mode, s.Mode)
	}
	return nil
}

// NotFrontend says why h is not a Switchyard frontend's /health (an engine
// worker's, say), or "" when it is one or cannot tell (an engine whose
// /health has no JSON body).
func (h Health) NotFrontend() string {
	switch {
	case h.Model != "" || h.Policy != "" || h.Workers != nil || h.Status == "unknown":
		return ""
	case h.ID != "":
		return fmt.Sprintf("it answers /health as engine worker %q does", h.ID)
	}
	return "its /health has no model, router policy or worker list"
}
