package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// Limits of the link and disaggregation admin endpoints.
const (
	defaultProbeBytes = 64 << 20
	maxProbeBytes     = 1 << 30
	// probeFloorRate is the slowest link a probe is given time for: the
	// probe's deadline is bytes / probeFloorRate + probeSlack.
	probeFloorRate   = 10e6 // bytes per second
	probeSlack       = 10 * time.Second
	maxPredictLens   = 64
	maxPredictTokens = 1 << 20
)

// LinkInfo is one prefill → decode link in /admin/links and /health.
type LinkInfo struct {
	From        string  `json:"from"`
	To          string  `json:"to"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	RTTMs       float64 `json:"rtt_ms"`
	Measured    bool    `json:"measured"`
	Samples     int     `json:"samples"`
	Emulated    string  `json:"emulated"`
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// linkInfos lists every (prefill worker, decode worker) pair of workers, in
// registry order, with the estimate Deps.Links has for it.
func (s *Server) linkInfos(workers []Worker) []LinkInfo {
	out := []LinkInfo{}
	for _, p := range workers {
		if p.Role != RolePrefill {
			continue
		}
		for _, d := range workers {
			if d.Role != RoleDecode {
				continue
			}
			li := LinkInfo{From: p.ID, To: d.ID}
			if s.deps.Links != nil {
				if st, ok := s.deps.Links.Link(p.ID, d.ID); ok {
					li.BytesPerSec, li.RTTMs, li.Measured = st.BytesPerSec, millis(st.RTT), st.Measured
					li.Samples, li.Emulated = st.Samples, st.Emulated
				}
			}
			out = append(out, li)
		}
	}
	return out
}

func (s *Server) handleLinks(w http.ResponseWriter, r *http.Request) {
	openai.WriteJSON(w, map[string]any{"links": s.linkInfos(s.deps.Workers.List())})
}

// decodeAdmin decodes an admin request body into v, refusing unknown
// fields so that a misspelt field is an error rather than a default.
func decodeAdmin(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, adminBodyLimit))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// workerWithRole finds id among workers and checks its role; param names
// the request field for the error.
func workerWithRole(workers []Worker, id, role, param string) (Worker, *apiError) {
	if id == "" {
		return Worker{}, badRequest(param, "frontend: %s is required", param)
	}
	for _, wk := range workers {
		if wk.ID != id {
			continue
		}
		if wk.Role != role {
			return Worker{}, badRequest(param, "frontend: worker %q has role %s; %s must be a %s worker", id, wk.Role, param, role)
		}
		return wk, nil
	}
	return Worker{}, badRequest(param, "frontend: worker %q is not registered", id)
}

type probeRequest struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Bytes *int64 `json:"bytes"`
}

type probeResponse struct {
	From        string  `json:"from"`
	To          string  `json:"to"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	BytesPerSec float64 `json:"bytes_per_sec"`
	RTTMs       float64 `json:"rtt_ms"`
	Emulated    string  `json:"emulated"`
}

// probeTimeout gives a probe of n bytes time to cross a 10 MB/s link, plus
// slack for connection setup.
func probeTimeout(n int64) time.Duration {
	return time.Duration(float64(n)/probeFloorRate*float64(time.Second)) + probeSlack
}

// handleProbe measures one prefill → decode link with Deps.Prober.
func (s *Server) handleProbe(w http.ResponseWriter, r *http.Request) {
	if s.deps.Prober == nil {
		s.fail(w, &apiError{status: http.StatusNotImplemented, typ: openai.TypeServer, kind: errKindProbe,
			msg: "frontend: no link prober configured"})
		return
	}
	var in probeRequest
	if err := decodeAdmin(w, r, &in); err != nil {
		s.fail(w, badRequest("", "frontend: probe wants {\"from\": \"<prefill id>\", \"to\": \"<decode id>\", \"bytes\": n}: %v", err))
		return
	}
	n := int64(defaultProbeBytes)
	if in.Bytes != nil {
		n = *in.Bytes
	}
	if n <= 0 || n > maxProbeBytes {
		s.fail(w, badRequest("bytes", "frontend: probe bytes %d out of range (0, %d]", n, maxProbeBytes))
		return
	}
	workers := s.deps.Workers.List()
	from, aerr := workerWithRole(workers, in.From, RolePrefill, "from")
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	to, aerr := workerWithRole(workers, in.To, RoleDecode, "to")
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), probeTimeout(n))
	defer cancel()
	res, err := s.deps.Prober.Probe(ctx, from, to, n)
	if err != nil {
		if r.Context().Err() != nil {
			s.m.errors.WithLabelValues(errKindClientCanceled).Inc()
			return
		}
		s.fail(w, &apiError{status: http.StatusBadGateway, typ: openai.TypeServer, kind: errKindProbe,
			msg: fmt.Sprintf("frontend: probe %s → %s: %v", from.ID, to.ID, err)})
		return
	}
	s.log.Info("link probed", "from", from.ID, "to", to.ID, "bytes", res.Bytes,
		"bytes_per_sec", res.BytesPerSec, "rtt", res.RTT, "emulated", res.Emulated)
	openai.WriteJSON(w, probeResponse{From: from.ID, To: to.ID, Bytes: res.Bytes, Seconds: res.Duration.Seconds(),
		BytesPerSec: res.BytesPerSec, RTTMs: millis(res.RTT), Emulated: res.Emulated})
}

type disaggState struct {
	Mode      string   `json:"mode"`
	Margin    *float64 `json:"margin,omitempty"`
	TTFTSLOMs *float64 `json:"ttft_slo_ms,omitempty"`
	ITLSLOMs  *float64 `json:"itl_slo_ms,omitempty"`
}

// disaggState is the mode in force and, when a GateInfo is configured, the
// gate's settings.
func (s *Server) disaggState() disaggState {
	st := disaggState{Mode: s.DisaggMode()}
	if gi := s.deps.gateInfo(); gi != nil {
		gs := gi.Settings()
		ttft, itl := millis(gs.TTFTSLO), millis(gs.ITLSLO)
		st.Margin, st.TTFTSLOMs, st.ITLSLOMs = &gs.Margin, &ttft, &itl
	}
	return st
}

func (s *Server) handleGetDisagg(w http.ResponseWriter, r *http.Request) {
	openai.WriteJSON(w, s.disaggState())
}

func (s *Server) handlePutDisagg(w http.ResponseWriter, r *http.Request) {
	// The body GET answers is accepted back: the gate's settings may be
	// sent as they are, and a change to them is refused by name, since
	// only the mode switches at run time.
	var in disaggState
	if err := decodeAdmin(w, r, &in); err != nil {
		s.fail(w, badRequest("", "frontend: PUT /admin/disagg wants {\"mode\": \"never|always|auto\"}: %v", err))
		return
	}
	cur := s.disaggState()
	for _, f := range []struct {
		name, flag string
		got, have  *float64
	}{{"margin", "--disagg-margin", in.Margin, cur.Margin}, {"ttft_slo_ms", "--ttft-slo", in.TTFTSLOMs, cur.TTFTSLOMs}, {"itl_slo_ms", "--itl-slo", in.ITLSLOMs, cur.ITLSLOMs}} {
		if f.got != nil && (f.have == nil || *f.got != *f.have) {
			s.fail(w, badRequest(f.name, "frontend: PUT /admin/disagg switches the mode only; %s is set by the frontend's %s at start", f.name, f.flag))
			return
		}
	}
	if err := s.SetDisaggMode(in.Mode); err != nil {
		s.fail(w, badRequest("mode", "%v", err))
		return
	}
	s.log.Info("disaggregation mode changed", "mode", in.Mode)
	if s.cfg.SettingsChanged != nil {
		s.cfg.SettingsChanged()
	}
	openai.WriteJSON(w, s.disaggState())
}

type predictRequest struct {
	PromptTokens []int  `json:"prompt_tokens"`
	Prefill      string `json:"prefill"`
	Decode       string `json:"decode"`
}

type predictionJSON struct {
	PromptTokens int     `json:"prompt_tokens"`
	KVBytes      int64   `json:"kv_bytes"`
	TransferS    float64 `json:"transfer_s"`
	LocalTTFTS   float64 `json:"local_ttft_s"`
	RemoteTTFTS  float64 `json:"remote_ttft_s"`
	Choice       string  `json:"choice"`
	Reason       string  `json:"reason"`
}

type predictLinkJSON struct {
	BytesPerSec float64 `json:"bytes_per_sec"`
	RTTMs       float64 `json:"rtt_ms"`
	Measured    bool    `json:"measured"`
	Emulated    string  `json:"emulated"`
}

type predictResponse struct {
	Prefill     string           `json:"prefill"`
	Decode      string           `json:"decode"`
	Predictions []predictionJSON `json:"predictions"`
	Link        predictLinkJSON  `json:"link"`
}

// firstWithRole is the ID of the first worker with role, or "".
func firstWithRole(workers []Worker, role string) string {
	for _, wk := range workers {
		if wk.Role == role {
			return wk.ID
		}
	}
	return ""
}

// handlePredict runs the gate's math for a list of prompt lengths on one
// prefill → decode pair.
func (s *Server) handlePredict(w http.ResponseWriter, r *http.Request) {
	pd := s.deps.predictor()
	if pd == nil {
		s.fail(w, &apiError{status: http.StatusNotImplemented, typ: openai.TypeServer, kind: errKindPredict,
			msg: "frontend: no disaggregation predictor configured"})
		return
	}
	var in predictRequest
	if err := decodeAdmin(w, r, &in); err != nil {
		s.fail(w, badRequest("", "frontend: predict wants {\"prompt_tokens\": [n, ...], \"prefill\": id, \"decode\": id}: %v", err))
		return
	}
	if len(in.PromptTokens) == 0 || len(in.PromptTokens) > maxPredictLens {
		s.fail(w, badRequest("prompt_tokens", "frontend: prompt_tokens needs 1 to %d lengths, got %d", maxPredictLens, len(in.PromptTokens)))
		return
	}
	for _, n := range in.PromptTokens {
		if n < 1 || n > maxPredictTokens {
			s.fail(w, badRequest("prompt_tokens", "frontend: prompt length %d out of range [1, %d]", n, maxPredictTokens))
			return
		}
	}
	workers := s.deps.Workers.List()
	if in.Prefill == "" {
		if in.Prefill = firstWithRole(workers, RolePrefill); in.Prefill == "" {
			s.fail(w, badRequest("prefill", "frontend: no prefill worker is registered"))
			return
		}
	}
	if in.Decode == "" {
		if in.Decode = firstWithRole(workers, RoleDecode); in.Decode == "" {
			s.fail(w, badRequest("decode", "frontend: no decode worker is registered"))
			return
		}
	}
	p, aerr := workerWithRole(workers, in.Prefill, RolePrefill, "prefill")
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	d, aerr := workerWithRole(workers, in.Decode, RoleDecode, "decode")
	if aerr != nil {
		s.fail(w, aerr)
		return
	}
	pred, err := pd.Predict(r.Context(), PredictInput{PromptTokens: in.PromptTokens, Prefill: p, Decode: d})
	if err == nil && len(pred.Predictions) != len(in.PromptTokens) {
		err = fmt.Errorf("predictor answered %d predictions for %d lengths", len(pred.Predictions), len(in.PromptTokens))
	}
	if err != nil {
		s.fail(w, &apiError{status: http.StatusInternalServerError, typ: openai.TypeServer, kind: errKindPredict,
			msg: fmt.Sprintf("frontend: predict %s → %s: %v", p.ID, d.ID, err)})
		return
	}
	out := predictResponse{Prefill: p.ID, Decode: d.ID, Predictions: make([]predictionJSON, len(pred.Predictions)),
		Link: predictLinkJSON{BytesPerSec: pred.Link.BytesPerSec, RTTMs: millis(pred.Link.RTT),
			Measured: pred.Link.Measured, Emulated: pred.Link.Emulated}}
	for i, pp := range pred.Predictions {
		out.Predictions[i] = predictionJSON{PromptTokens: pp.PromptTokens, KVBytes: pp.KVBytes,
			TransferS: pp.Transfer.Seconds(), LocalTTFTS: pp.LocalTTFT.Seconds(), RemoteTTFTS: pp.RemoteTTFT.Seconds(),
			Choice: pp.Choice, Reason: pp.Reason}
	}
	openai.WriteJSON(w, out)
}
