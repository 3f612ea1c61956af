package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// prefillParams are the kv_transfer_params of a prefill request, exactly as
// vLLM's NixlConnector proxy sends them: a real prefill engine expects the
// remote_* keys present and null.
var prefillParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// remotePrefill runs the prefill step on p: the original request with
// kv_transfer_params asking for remote decode, stream off and one output
// token. It returns p's kv_transfer_params, an opaque dictionary the decode
// worker understands. overlap is the prompt's leading blocks p holds.
//
// It also returns the usage p answered with, nil if none.
func (s *Server) remotePrefill(ctx context.Context, ep endpoint, pr *parsedRequest, p Worker, overlap int, reqID string) (json.RawMessage, *openai.Usage, error) {
	body, err := rewriteBody(pr.body, map[string]json.RawMessage{
		"kv_transfer_params":    prefillParams,
		"stream":                json.RawMessage("false"),
		"max_tokens":            json.RawMessage("1"),
		"max_completion_tokens": json.RawMessage("1"),
		"stream_options":        nil,
		// One prefill serves every choice the decode worker samples, and
		// min_tokens above the prefill's one token would be refused.
		"n":          nil,
		"min_tokens": nil,
	})
	if err != nil {
		return nil, nil, err
	}
	if s.deps.InFlight != nil {
		s.deps.InFlight.Started(p.ID, reqID, max(0, len(pr.hashes)-overlap), s.promptBlocks(pr))
		defer s.deps.InFlight.Finished(p.ID, reqID)
	}
	ctr := s.inflightCounter(p.ID)
	ctr.Add(1)
	defer ctr.Add(-1)

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+ep.path, bytes.NewReader(body))
	if err != nil {
		return nil, nil, fmt.Errorf("frontend: prefill on %s: %w", p.ID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(headerRequestID, reqID)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("frontend: prefill on %s: %w", p.ID, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, nil, fmt.Errorf("frontend: prefill on %s: read answer: %w", p.ID, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("frontend: prefill on %s: status %d: %s", p.ID, resp.StatusCode, bytes.TrimSpace(data[:min(len(data), 512)]))
	}
	var out struct {
		KVTransferParams json.RawMessage `json:"kv_transfer_params"`
		Usage            *openai.Usage   `json:"usage"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, nil, fmt.Errorf("frontend: prefill on %s: decode answer: %w", p.ID, err)
	}
	if len(out.KVTransferParams) == 0 || bytes.Equal(out.KVTransferParams, []byte("null")) {
		return nil, nil, fmt.Errorf("frontend: prefill on %s: answer has no kv_transfer_params", p.ID)
	}
	return out.KVTransferParams, out.Usage, nil
}
