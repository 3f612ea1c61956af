package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeLinks map[[2]string]LinkStatus

func (fl fakeLinks) Link(from, to string) (LinkStatus, bool) {
	st, ok := fl[[2]string{from, to}]
	return st, ok
}

type probeCall struct {
	from, to Worker
	bytes    int64
	budget   time.Duration // time left on ctx when Probe was called
}

type fakeProber struct {
	mu    sync.Mutex
	calls []probeCall
	err   error
}

func (fp *fakeProber) Probe(ctx context.Context, from, to Worker, n int64) (ProbeResult, error) {
	dl, ok := ctx.Deadline()
	if !ok {
		return ProbeResult{}, errors.New("fake prober: no deadline")
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	fp.calls = append(fp.calls, probeCall{from: from, to: to, bytes: n, budget: time.Until(dl)})
	if fp.err != nil {
		return ProbeResult{}, fp.err
	}
	d := time.Duration(n) * time.Second / 119_000_000
	return ProbeResult{Bytes: n, Duration: d, BytesPerSec: float64(n) / d.Seconds(), RTT: 200 * time.Microsecond,
		Emulated: "1 Gbit/s (emulated)"}, nil
}

// fullGate is a fake gate that also reports settings and predicts: the
// optional interfaces the frontend checks at run time.
type fullGate struct {
	fakeGate
	settings GateSettings

	mu     sync.Mutex
	inputs []PredictInput
	err    error
	drop   bool // answer one prediction too few
}

func (g *fullGate) Settings() GateSettings { return g.settings }

func (g *fullGate) Predict(ctx context.Context, in PredictInput) (Prediction, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inputs = append(g.inputs, in)
	if g.err != nil {
		return Prediction{}, g.err
	}
	const bps, perTok = 119e6, 114688 // a 1 Gbit/s link, Qwen3-0.6B-like KV size
	var out Prediction
	for _, n := range in.PromptTokens {
		kv := int64(n) * perTok
		xfer := time.Duration(float64(kv) / bps * float64(time.Second))
		local := time.Duration(n) * 50 * time.Microsecond
		p := PromptPrediction{PromptTokens: n, KVBytes: kv, Transfer: xfer, LocalTTFT: local, RemoteTTFT: xfer + local/2,
			Choice: "local", Reason: "link_too_slow"}
		if p.RemoteTTFT < local {
			p.Choice, p.Reason = "remote", "remote_faster"
		}
		out.Predictions = append(out.Predictions, p)
	}
	if g.drop {
		out.Predictions = out.Predictions[1:]
	}
	out.Link = LinkStatus{BytesPerSec: bps, RTT: 300 * time.Microsecond, Measured: true, Emulated: "1 Gbit/s (emulated)"}
	return out, nil
}

func pdWorkers(ids ...string) []Worker {
	var out []Worker
	for _, id := range ids {
		role := map[byte]string{'p': RolePrefill, 'd': RoleDecode, 'a': RoleAggregated}[id[0]]
		out = append(out, Worker{ID: id, Role: role, Model: testModel, URL: "http://127.0.0.1:1"})
	}
	return out
}

func TestNewAdminEndpointsNeedAdmin(t *testing.T) {
	h := newHarness(t, Config{APIKey: "k", AdminKey: "adm"}, Deps{Gate: &fullGate{}, Prober: &fakeProber{}}, pdWorkers("p1", "d1")...)
	for _, ep := range []struct{ method, path, body string }{
		{"GET", "/admin/links", ""},
		{"POST", "/admin/links/probe", `{"from":"p1","to":"d1"}`},
		{"GET", "/admin/disagg", ""},
		{"PUT", "/admin/disagg", `{"mode":"never"}`},
		{"POST", "/admin/disagg/predict", `{"prompt_tokens":[100]}`},
	} {
		for _, auth := range []string{"", "Bearer k", "Bearer wrong"} {
			resp, _ := h.do(t, ep.method, ep.path, ep.body, "Authorization", auth)
			if resp.StatusCode != 401 {
				t.Errorf("%s %s with %q: status %d, want 401", ep.method, ep.path, auth, resp.StatusCode)
			}
		}
		resp, body := h.do(t, ep.method, ep.path, ep.body, "Authorization", "Bearer adm")
		if resp.StatusCode != 200 {
			t.Errorf("%s %s as admin: status %d: %s", ep.method, ep.path, resp.StatusCode, body)
		}
	}
	if got := h.s.DisaggMode(); got != DisaggNever {
		t.Errorf("mode after admin PUT = %q, want never (and unchanged by the refused ones)", got)
	}
}

func TestAdminLinks(t *testing.T) {
	links := fakeLinks{
		{"p1", "d1"}: {BytesPerSec: 1.19e8, RTT: 200 * time.Microsecond, Measured: true, Samples: 3, Emulated: "1 Gbit/s (emulated)"},
		{"p2", "d1"}: {}, // known but never measured
	}
	h := newHarness(t, Config{}, Deps{Links: links}, pdWorkers("p1", "a1", "d1", "p2", "d2")...)
	resp, body := h.do(t, "GET", "/admin/links", "")
	var got struct {
		Links []LinkInfo `json:"links"`
	}
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("links = %d %s (%v)", resp.StatusCode, body, err)
	}
	want := []LinkInfo{
		{From: "p1", To: "d1", BytesPerSec: 1.19e8, RTTMs: 0.2, Measured: true, Samples: 3, Emulated: "1 Gbit/s (emulated)"},
		{From: "p1", To: "d2"},
		{From: "p2", To: "d1"},
		{From: "p2", To: "d2"},
	}
	if !reflect.DeepEqual(got.Links, want) {
		t.Errorf("links =\n%+v\nwant\n%+v", got.Links, want)
	}
	if !strings.Contains(string(body), `"measured":false`) || !strings.Contains(string(body), `"rtt_ms":0.2`) {
		t.Errorf("links body lacks explicit fields: %s", body)
	}

	// Without a Links dependency every pair is listed, unmeasured; without
	// prefill workers the list is empty, not null.
	h = newHarness(t, Config{}, Deps{}, pdWorkers("p1", "d1")...)
	_, body = h.do(t, "GET", "/admin/links", "")
	if s := strings.TrimSpace(string(body)); s != `{"links":[{"from":"p1","to":"d1","bytes_per_sec":0,"rtt_ms":0,"measured":false,"samples":0,"emulated":""}]}` {
		t.Errorf("links without estimator = %s", s)
	}
	h = newHarness(t, Config{}, Deps{}, pdWorkers("a1")...)
	if _, body = h.do(t, "GET", "/admin/links", ""); strings.TrimSpace(string(body)) != `{"links":[]}` {
		t.Errorf("links without prefill workers = %s", body)
	}
}

func TestAdminProbe(t *testing.T) {
	fp := &fakeProber{}
	h := newHarness(t, Config{}, Deps{Prober: fp}, pdWorkers("p1", "d1", "a1")...)

	resp, body := h.do(t, "POST", "/admin/links/probe", `{"from":"p1","to":"d1"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("probe = %d %s", resp.StatusCode, body)
	}
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got["from"] != "p1" || got["to"] != "d1" || got["bytes"] != float64(64<<20) || got["rtt_ms"] != 0.2 ||
		got["emulated"] != "1 Gbit/s (emulated)" {
		t.Errorf("probe answer = %v", got)
	}
	if bps, _ := got["bytes_per_sec"].(float64); bps < 1.18e8 || bps > 1.20e8 {
		t.Errorf("bytes_per_sec = %v, want about 1.19e8", got["bytes_per_sec"])
	}
	if sec, _ := got["seconds"].(float64); sec < 0.56 || sec > 0.57 {
		t.Errorf("seconds = %v, want 64 MiB / 119 MB/s ≈ 0.564", got["seconds"])
	}
	fp.mu.Lock()
	c := fp.calls[0]
	fp.mu.Unlock()
	if c.from.ID != "p1" || c.to.ID != "d1" || c.from.URL == "" || c.bytes != 64<<20 {
		t.Errorf("prober call = %+v", c)
	}
	// 64 MiB at 10 MB/s is 6.7 s, plus 10 s of slack.
	if want := probeTimeout(64 << 20); want < 16700*time.Millisecond || want > 16800*time.Millisecond ||
		c.budget > want || c.budget < want-5*time.Second {
		t.Errorf("probe deadline budget %v, timeout %v; want about 16.7 s", c.budget, want)
	}

	resp, body = h.do(t, "POST", "/admin/links/probe", `{"from":"p1","to":"d1","bytes":1073741824}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"bytes":1073741824`) {
		t.Errorf("1 GiB probe = %d %s", resp.StatusCode, body)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"unknown from", `{"from":"p9","to":"d1"}`, `"p9" is not registered`},
		{"unknown to", `{"from":"p1","to":"d9"}`, `"d9" is not registered`},
		{"from is decode", `{"from":"d1","to":"d1"}`, `"d1" has role decode`},
		{"to is prefill", `{"from":"p1","to":"p1"}`, `"p1" has role prefill`},
		{"to is aggregated", `{"from":"p1","to":"a1"}`, `"a1" has role aggregated`},
		{"missing from", `{"to":"d1"}`, "from is required"},
		{"zero bytes", `{"from":"p1","to":"d1","bytes":0}`, "out of range"},
		{"negative bytes", `{"from":"p1","to":"d1","bytes":-5}`, "out of range"},
		{"over 1 GiB", `{"from":"p1","to":"d1","bytes":1073741825}`, "out of range"},
		{"unknown field", `{"from":"p1","to":"d1","byte":5}`, "unknown field"},
		{"not json", `probe please`, "probe wants"},
	} {
		resp, body := h.do(t, "POST", "/admin/links/probe", tc.body)
		if e := decodeError(t, body); resp.StatusCode != 400 || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %d %+v, want 400 containing %q", tc.name, resp.StatusCode, e, tc.want)
		}
	}
	fp.mu.Lock()
	n := len(fp.calls)
	fp.err = errors.New("kvxfer: dial 10.0.0.9:7100: connection refused")
	fp.mu.Unlock()
	if n != 2 {
		t.Errorf("prober called %d times, want 2 (invalid requests must not reach it)", n)
	}
	resp, body = h.do(t, "POST", "/admin/links/probe", `{"from":"p1","to":"d1","bytes":1000}`)
	if e := decodeError(t, body); resp.StatusCode != 502 || !strings.Contains(e.Message, "connection refused") {
		t.Errorf("failed probe = %d %+v, want 502 with the error", resp.StatusCode, e)
	}

	h = newHarness(t, Config{}, Deps{}, pdWorkers("p1", "d1")...)
	if resp, _ := h.do(t, "POST", "/admin/links/probe", `{"from":"p1","to":"d1"}`); resp.StatusCode != 501 {
		t.Errorf("probe without prober = %d, want 501", resp.StatusCode)
	}
}

func TestAdminDisaggModeSwitch(t *testing.T) {
	p, d := newFakeWorker(t, "p1"), newFakeWorker(t, "d1")
	g := &fullGate{settings: GateSettings{Margin: 0.1, TTFTSLO: 2 * time.Second, ITLSLO: 100 * time.Millisecond}}
	g.decision = GateDecision{Remote: false, Reason: "link_too_slow", PredictedLocal: 30 * time.Millisecond}
	h := newHarness(t, Config{}, Deps{Gate: g}, p.worker(RolePrefill), d.worker(RoleDecode))

	resp, body := h.do(t, "GET", "/admin/disagg", "")
	if s := strings.TrimSpace(string(body)); resp.StatusCode != 200 || s != `{"mode":"auto","margin":0.1,"ttft_slo_ms":2000,"itl_slo_ms":100}` {
		t.Errorf("GET /admin/disagg = %d %s", resp.StatusCode, s)
	}
	resp, _ = h.do(t, "POST", "/v1/completions", disaggBody)
	if resp.Header.Get(HeaderDisaggMode) != DisaggAuto || resp.Header.Get(HeaderPrefill) != "local" {
		t.Errorf("auto: headers %v", resp.Header)
	}

	// GET's body goes back through PUT unchanged; a changed gate setting is
	// refused by name.
	resp, body = h.do(t, "PUT", "/admin/disagg", `{"mode":"auto","margin":0.1,"ttft_slo_ms":2000,"itl_slo_ms":100}`)
	if resp.StatusCode != 200 {
		t.Errorf("PUT of GET's body = %d %s", resp.StatusCode, body)
	}
	resp, body = h.do(t, "PUT", "/admin/disagg", `{"mode":"auto","margin":0.3}`)
	if e := decodeError(t, body); resp.StatusCode != 400 || !strings.Contains(e.Message, "--disagg-margin") {
		t.Errorf("PUT with a new margin = %d %+v; want 400 naming --disagg-margin", resp.StatusCode, e)
	}
	resp, body = h.do(t, "PUT", "/admin/disagg", `{"mode":"never"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"mode":"never"`) {
		t.Errorf("PUT never = %d %s", resp.StatusCode, body)
	}
	resp, _ = h.do(t, "POST", "/v1/completions", disaggBody)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderPrefill) != "local" || resp.Header.Get(HeaderDisaggMode) != DisaggNever {
		t.Errorf("never: want local prefill under mode never: %v", resp.Header)
	}
	var hl Health
	if _, body = h.do(t, "GET", "/health", ""); json.Unmarshal(body, &hl) != nil || hl.Disagg != DisaggNever {
		t.Errorf("health disagg after PUT never = %s", body)
	}

	h.do(t, "PUT", "/admin/disagg", `{"mode":"always"}`)
	resp, _ = h.do(t, "POST", "/v1/completions", disaggBody)
	if resp.Header.Get(HeaderDisaggMode) != DisaggAlways {
		t.Errorf("always: mode header %q", resp.Header.Get(HeaderDisaggMode))
	}
	g.fakeGate.mu.Lock()
	var modes []string
	for _, in := range g.fakeGate.inputs {
		modes = append(modes, in.Mode)
	}
	g.fakeGate.mu.Unlock()
	if !reflect.DeepEqual(modes, []string{DisaggAuto, DisaggNever, DisaggAlways}) {
		t.Errorf("gate saw modes %q, want [auto never always]: each switch reaches the next request", modes)
	}

	for _, bad := range []string{`{"mode":"sometimes"}`, `{"mode":""}`, `{}`, `{"mode":"auto","margin":0.5}`, `auto`} {
		resp, body := h.do(t, "PUT", "/admin/disagg", bad)
		if resp.StatusCode != 400 {
			t.Errorf("PUT %s = %d %s, want 400", bad, resp.StatusCode, body)
		}
	}
	if got := h.s.DisaggMode(); got != DisaggAlways {
		t.Errorf("mode after refused PUTs = %q, want always", got)
	}

	// A gate without settings: the mode alone.
	h = newHarness(t, Config{DisaggMode: DisaggNever}, Deps{Gate: &fakeGate{}})
	if _, body = h.do(t, "GET", "/admin/disagg", ""); strings.TrimSpace(string(body)) != `{"mode":"never"}` {
		t.Errorf("GET /admin/disagg without settings = %s", body)
	}
	// Deps.GateInfo wins over the gate.
	h = newHarness(t, Config{}, Deps{Gate: g, GateInfo: &fullGate{settings: GateSettings{Margin: 0.25}}})
	if _, body = h.do(t, "GET", "/admin/disagg", ""); !strings.Contains(string(body), `"margin":0.25`) {
		t.Errorf("GET /admin/disagg with Deps.GateInfo = %s", body)
	}
}

func TestAdminDisaggPredict(t *testing.T) {
	g := &fullGate{}
	h := newHarness(t, Config{}, Deps{Gate: g}, pdWorkers("a1", "d1", "p1", "p2", "d2")...)

	resp, body := h.do(t, "POST", "/admin/disagg/predict", `{"prompt_tokens":[1500,3000]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("predict = %d %s", resp.StatusCode, body)
	}
	var got predictResponse
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Prefill != "p1" || got.Decode != "d1" || len(got.Predictions) != 2 {
		t.Fatalf("predict = %+v, want the first prefill and decode workers and 2 predictions", got)
	}
	p0 := got.Predictions[0]
	wantKV := int64(1500 * 114688)
	if p0.PromptTokens != 1500 || p0.KVBytes != wantKV || p0.Choice != "local" || p0.Reason != "link_too_slow" ||
		p0.LocalTTFTS != 0.075 || p0.TransferS < 1.44 || p0.TransferS > 1.45 || p0.RemoteTTFTS <= p0.TransferS {
		t.Errorf("prediction[0] = %+v", p0)
	}
	if got.Predictions[1].PromptTokens != 3000 {
		t.Errorf("prediction order: %+v", got.Predictions)
	}
	if l := got.Link; l.BytesPerSec != 119e6 || l.RTTMs != 0.3 || !l.Measured || l.Emulated != "1 Gbit/s (emulated)" {
		t.Errorf("link = %+v", l)
	}
	for _, k := range []string{`"transfer_s"`, `"local_ttft_s"`, `"remote_ttft_s"`, `"kv_bytes"`, `"choice"`, `"reason"`, `"measured"`} {
		if !strings.Contains(string(body), k) {
			t.Errorf("predict body lacks %s: %s", k, body)
		}
	}

	if resp, body = h.do(t, "POST", "/admin/disagg/predict", `{"prompt_tokens":[1],"prefill":"p2","decode":"d2"}`); resp.StatusCode != 200 {
		t.Errorf("explicit pair = %d %s", resp.StatusCode, body)
	}
	g.mu.Lock()
	in := g.inputs[len(g.inputs)-1]
	g.mu.Unlock()
	if in.Prefill.ID != "p2" || in.Decode.ID != "d2" || in.Prefill.URL == "" || !reflect.DeepEqual(in.PromptTokens, []int{1}) {
		t.Errorf("predictor input = %+v", in)
	}

	lens := make([]string, 65)
	for i := range lens {
		lens[i] = strconv.Itoa(i + 1)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"no lengths", `{"prompt_tokens":[]}`, "1 to 64 lengths, got 0"},
		{"missing lengths", `{}`, "1 to 64 lengths, got 0"},
		{"65 lengths", `{"prompt_tokens":[` + strings.Join(lens, ",") + `]}`, "got 65"},
		{"zero length", `{"prompt_tokens":[10,0]}`, "prompt length 0 out of range"},
		{"too long", `{"prompt_tokens":[1048577]}`, "1048577 out of range"},
		{"prefill is decode", `{"prompt_tokens":[10],"prefill":"d1"}`, `"d1" has role decode`},
		{"decode is aggregated", `{"prompt_tokens":[10],"decode":"a1"}`, `"a1" has role aggregated`},
		{"unknown decode", `{"prompt_tokens":[10],"decode":"d7"}`, `"d7" is not registered`},
		{"unknown field", `{"prompt_tokens":[10],"queue":3}`, "unknown field"},
	} {
		resp, body := h.do(t, "POST", "/admin/disagg/predict", tc.body)
		if e := decodeError(t, body); resp.StatusCode != 400 || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %d %+v, want 400 containing %q", tc.name, resp.StatusCode, e, tc.want)
		}
	}
	if resp, _ := h.do(t, "POST", "/admin/disagg/predict", `{"prompt_tokens":[1048576,64]}`); resp.StatusCode != 200 {
		t.Errorf("lengths at the limits = %d, want 200", resp.StatusCode)
	}

	g.mu.Lock()
	g.drop = true
	g.mu.Unlock()
	resp, body = h.do(t, "POST", "/admin/disagg/predict", `{"prompt_tokens":[10,20]}`)
	if e := decodeError(t, body); resp.StatusCode != 500 || !strings.Contains(e.Message, "1 predictions for 2 lengths") {
		t.Errorf("short predictor answer = %d %+v", resp.StatusCode, e)
	}
	g.mu.Lock()
	g.drop, g.err = false, errors.New("perfmodel: no profile for d1")
	g.mu.Unlock()
	resp, body = h.do(t, "POST", "/admin/disagg/predict", `{"prompt_tokens":[10]}`)
	if e := decodeError(t, body); resp.StatusCode != 500 || !strings.Contains(e.Message, "no profile for d1") {
		t.Errorf("predictor error = %d %+v", resp.StatusCode, e)
	}

	// No prefill worker to default to.
	h = newHarness(t, Config{}, Deps{Gate: g}, pdWorkers("d1")...)
	resp, body = h.do(t, "POST", "/admin/disagg/predict", `{"prompt_tokens":[10]}`)
	if e := decodeError(t, body); resp.StatusCode != 400 || !strings.Contains(e.Message, "no prefill worker") {
		t.Errorf("predict without prefill workers = %d %+v", resp.StatusCode, e)
	}
	// A plain gate and no Deps.Predictor: not implemented. Deps.Predictor
	// alone is enough.
	h = newHarness(t, Config{}, Deps{Gate: &fakeGate{}}, pdWorkers("p1", "d1")...)
	if resp, _ := h.do(t, "POST", "/admin/disagg/predict", `{"prompt_tokens":[10]}`); resp.StatusCode != 501 {
		t.Errorf("predict without predictor = %d, want 501", resp.StatusCode)
	}
	h = newHarness(t, Config{}, Deps{Predictor: &fullGate{}}, pdWorkers("p1", "d1")...)
	if resp, body := h.do(t, "POST", "/admin/disagg/predict", `{"prompt_tokens":[10]}`); resp.StatusCode != 200 {
		t.Errorf("predict with Deps.Predictor = %d %s", resp.StatusCode, body)
	}
}

func TestHealthWorkerDetailsAndLinks(t *testing.T) {
	ws := pdWorkers("p1", "d1")
	ws[0].BlockSize, ws[0].KVBytesPerToken, ws[0].KVXferAddr = 16, 114688, "127.0.0.1:7100"
	ws[0].Profile = map[string]float64{"prefill_tok_per_s": 20000}
	links := fakeLinks{{"p1", "d1"}: {BytesPerSec: 1.19e8, Measured: true, Samples: 1}}
	h := newHarness(t, Config{}, Deps{Links: links}, ws...)
	_, body := h.do(t, "GET", "/health", "")
	var raw struct {
		Workers []map[string]any `json:"workers"`
		Links   []LinkInfo       `json:"links"`
	}
	if err := json.Unmarshal(body, &raw); err != nil || len(raw.Workers) != 2 {
		t.Fatalf("health = %s (%v)", body, err)
	}
	w0, w1 := raw.Workers[0], raw.Workers[1]
	if w0["block_size"] != 16.0 || w0["kv_bytes_per_token"] != 114688.0 || w0["kvxfer_addr"] != "127.0.0.1:7100" ||
		!reflect.DeepEqual(w0["profile"], map[string]any{"prefill_tok_per_s": 20000.0}) {
		t.Errorf("worker details = %v", w0)
	}
	for _, k := range []string{"block_size", "kv_bytes_per_token", "kvxfer_addr", "profile"} {
		if _, ok := w1[k]; ok {
			t.Errorf("unset %s shown for d1: %v", k, w1)
		}
	}
	if w0["id"] != "p1" || w0["role"] != RolePrefill || w0["inflight"] != 0.0 || w0["events"] == nil {
		t.Errorf("existing worker fields lost: %v", w0)
	}
	want := []LinkInfo{{From: "p1", To: "d1", BytesPerSec: 1.19e8, Measured: true, Samples: 1}}
	if !reflect.DeepEqual(raw.Links, want) {
		t.Errorf("health links = %+v, want %+v", raw.Links, want)
	}

	h = newHarness(t, Config{}, Deps{Links: links}, pdWorkers("a1", "d1")...)
	if _, body = h.do(t, "GET", "/health", ""); strings.Contains(string(body), `"links"`) {
		t.Errorf("health without prefill workers shows links: %s", body)
	}
}

// TestDisaggDecodeFailureRetriesLocally: after a successful remote prefill
// the decode worker fails before its first byte. P's kv_transfer_params
// belong to that worker, so the retry on another decode worker must carry
// the original body and prefill locally.
func TestDisaggDecodeFailureRetriesLocally(t *testing.T) {
	p, d1, d2 := newFakeWorker(t, "p1"), newFakeWorker(t, "d1"), newFakeWorker(t, "d2")
	d1.setMode(mode500)
	g := &fakeGate{decision: GateDecision{Remote: true, Reason: "remote_faster", PredictedLocal: 90 * time.Millisecond,
		PredictedRemote: 40 * time.Millisecond, KVBytes: 4096}}
	h := newHarness(t, Config{}, Deps{Gate: g}, p.worker(RolePrefill), d1.worker(RoleDecode), d2.worker(RoleDecode))
	h.router.prefer = []string{"d1"}

	resp, body := h.do(t, "POST", "/v1/completions", disaggBody)
	if resp.StatusCode != 200 || resp.Header.Get(HeaderWorker) != "d2" {
		t.Fatalf("status %d worker %q: %s", resp.StatusCode, resp.Header.Get(HeaderWorker), body)
	}
	if resp.Header.Get(HeaderPrefill) != "local" || resp.Header.Get(HeaderKVBytes) != "0" ||
		!strings.Contains(resp.Header.Get(HeaderDisaggReason), "d1 failed after remote prefill") ||
		resp.Header.Get(HeaderPredictedTTFT) != "90.000" || resp.Header.Get(HeaderDisaggMode) != DisaggAuto {
		t.Errorf("headers after local retry: %v", resp.Header)
	}
	if n := len(p.received()); n != 1 {
		t.Errorf("prefill worker got %d requests, want 1", n)
	}
	if db := d1.received(); len(db) != 1 || decodeFields(t, db[0])["kv_transfer_params"] == nil {
		t.Errorf("d1 should have got the params: %q", db)
	}
	if db := d2.received(); len(db) != 1 || string(db[0]) != disaggBody {
		t.Errorf("d2 got %q, want the original body without kv_transfer_params", db)
	}
	if f, r := value(t, h.s.m.fallbacks), value(t, h.s.m.retries); f != 1 || r != 1 {
		t.Errorf("fallbacks %v retries %v, want 1 and 1", f, r)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.observed) != 0 {
		t.Errorf("gate observed a retried request: %+v", g.observed)
	}
}
