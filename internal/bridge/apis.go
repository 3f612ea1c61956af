package bridge

import (
	"bytes"
	"context"
	"io"
	"net/http"
)

// apiProbes are the endpoints beyond chat and completions an engine may
// serve, by the name the registry gives them. vLLM serves /v1/responses
// since 0.10 and /v1/messages since 0.11.1; SGLang serves neither.
var apiProbes = []struct{ name, path string }{
	{"messages", "/v1/messages"},
	{"responses", "/v1/responses"},
	{"embeddings", "/v1/embeddings"},
}

// probeAPIs asks the engine which of apiProbes it serves: an empty JSON
// object is a request every engine refuses without generating anything,
// with 404 (or 405) when the route does not exist and a 400 or 422
// validation error when it does. An engine that cannot be asked is taken
// to serve none of them, so the frontend translates.
func (b *Bridge) probeAPIs(ctx context.Context) []string {
	var out []string
	for _, p := range apiProbes {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.cfg.EngineURL+p.path, bytes.NewReader([]byte("{}")))
		if err != nil {
			continue
		}
		req.Header.Set("Content-Type", "application/json")
		if b.cfg.WorkerKey != "" {
			req.Header.Set("Authorization", "Bearer "+b.cfg.WorkerKey)
		}
		resp, err := b.cfg.HTTPClient.Do(req)
		if err != nil {
			b.log.Warn("bridge: probe of the engine's endpoints failed; the frontend will translate it into chat completions", "path", p.path, "err", err)
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusUnprocessableEntity {
			out = append(out, p.name)
		}
	}
	return out
}
