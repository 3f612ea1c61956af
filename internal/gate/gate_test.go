package gate

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Field-report numbers: Qwen3-0.6B, 3,067 prompt tokens, 104 MB/s.
const (
	qwenKVBytes  = 114688
	llamaKVBytes = 131072 // llama-3.1-8b
	fieldTokens  = 3067
	fieldLinkBPS = 104e6
)

// linearPrefill predicts perToken of compute per new token, ignoring cache
// context; enough to pin the gate's arithmetic.
func linearPrefill(perToken time.Duration) PrefillFunc {
	return func(newTokens, _ int) time.Duration { return time.Duration(newTokens) * perToken }
}

func newGate(t testing.TB, cfg Config) *Gate {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func approx(got, want time.Duration, tol float64) bool {
	return math.Abs(float64(got-want)) <= tol*float64(want)
}

func TestFieldReport(t *testing.T) {
	// ~0.15 s to prefill 3,067 tokens locally (an RTX-class GPU on a 0.6B
	// model), P the same, both idle; the link the field report measured.
	prefill := func(newTokens, _ int) time.Duration {
		return 150 * time.Millisecond * time.Duration(newTokens) / fieldTokens
	}
	in := Input{
		PromptTokens: fieldTokens, KVBytesPerToken: qwenKVBytes,
		PrefillD: prefill, PrefillP: prefill,
		Link: Link{"p0", "d0"},
	}
	const rtt = 300 * time.Microsecond
	secs := float64(fieldTokens*qwenKVBytes) / fieldLinkBPS
	wantTransfer := time.Duration(secs*float64(time.Second)) + rtt

	for _, tt := range []struct {
		mode       Mode
		wantChoice Choice
		wantReason Reason
	}{
		{ModeAuto, ChoiceLocal, ReasonLocalFaster},
		{ModeAlways, ChoiceRemote, ReasonModeAlways},
		{ModeNever, ChoiceLocal, ReasonModeNever},
	} {
		t.Run(string(tt.mode), func(t *testing.T) {
			g := newGate(t, Config{Mode: tt.mode})
			g.Links().ObserveProbe("p0", "d0", fieldLinkBPS, rtt)
			d := g.Decide(in)
			if d.Choice != tt.wantChoice || d.Reason != tt.wantReason {
				t.Errorf("decision %s (%s), want %s (%s)", d.Choice, d.Reason, tt.wantChoice, tt.wantReason)
			}
			if got, want := d.TransferBytes, int64(351_748_096); got != want {
				t.Errorf("transfer bytes %d, want %d (≈351.75 MB)", got, want)
			}
			if !approx(d.TransferTime, wantTransfer, 1e-6) || d.TransferTime < 3370*time.Millisecond || d.TransferTime > 3390*time.Millisecond {
				t.Errorf("transfer time %v, want ≈3.38 s", d.TransferTime)
			}
			if !approx(d.TLocal, 150*time.Millisecond, 1e-6) {
				t.Errorf("t_local %v, want 150ms", d.TLocal)
			}
			if !approx(d.TRemote, 150*time.Millisecond+wantTransfer, 1e-6) {
				t.Errorf("t_remote %v, want prefill + 3.38 s = %v", d.TRemote, 150*time.Millisecond+wantTransfer)
			}
			if ratio := float64(d.TRemote) / float64(d.TLocal); ratio < 20 {
				t.Errorf("remote/local = %.1f, the field report saw > 20×", ratio)
			}
		})
	}
}

func TestDecideTable(t *testing.T) {
	// llama-3.1-8b with a long prompt on an RDMA-class 12 GB/s link.
	const fastLink = 12e9
	prefill100us := linearPrefill(100 * time.Microsecond) // 10k tokens/s
	base := Input{
		PromptTokens: 32000, KVBytesPerToken: llamaKVBytes,
		PrefillD: prefill100us, PrefillP: prefill100us,
		Link: Link{"p0", "d0"},
	}
	tests := []struct {
		name       string
		cfg        Config
		bps        float64 // 0: unmeasured
		edit       func(*Input)
		wantChoice Choice
		wantReason Reason
	}{
		{"busy decode worker, fast link: remote pays", Config{}, fastLink,
			func(in *Input) { in.QueueD = 2 * time.Second }, ChoiceRemote, ReasonRemoteFaster},
		{"idle decode worker: local is faster", Config{}, fastLink,
			nil, ChoiceLocal, ReasonLocalFaster},
		{"prefix cached on P but not D", Config{}, fastLink,
			func(in *Input) { in.CachedP = 30000 }, ChoiceRemote, ReasonRemoteFaster},
		{"within margin stays local", Config{Margin: 0.5}, fastLink,
			func(in *Input) { in.QueueD = 2 * time.Second }, ChoiceLocal, ReasonLocalFaster},
		{"unmeasured link counts as too slow", Config{}, 0,
			func(in *Input) { in.QueueD = 10 * time.Second }, ChoiceLocal, ReasonLinkUnmeasured},
		{"always with unmeasured link", Config{Mode: ModeAlways}, 0,
			nil, ChoiceRemote, ReasonModeAlways},
		{"never", Config{Mode: ModeNever}, fastLink,
			func(in *Input) { in.QueueD = 10 * time.Second }, ChoiceLocal, ReasonModeNever},
		{"no prefill worker", Config{Mode: ModeAlways}, fastLink,
			func(in *Input) { in.PrefillP = nil }, ChoiceLocal, ReasonNoPrefillWorker},
		{"no link endpoints", Config{}, fastLink,
			func(in *Input) { in.Link = Link{} }, ChoiceLocal, ReasonNoPrefillWorker},
		{"fully cached on D", Config{}, fastLink,
			func(in *Input) { in.CachedD = 32000; in.QueueP = 0 }, ChoiceLocal, ReasonLocalFaster},
		// 8k tokens: 0.8 s either way, D queued 0.1 s, P 0.05 s, transfer
		// 0.09 s: remote (0.94 s) is slower than local (0.9 s) but within
		// the margin; 32 decodes on D at 20 ms steps would see 0.8 s / 16
		// chunks = 50 ms more per token.
		{"itl protect", Config{ITLSLO: 50 * time.Millisecond}, fastLink,
			itlCase, ChoiceRemote, ReasonITLProtect},
		// P queued 0.3 s: remote (1.19 s) is more than the margin slower.
		{"itl protect would cost more than the margin", Config{ITLSLO: 50 * time.Millisecond}, fastLink,
			func(in *Input) { itlCase(in); in.QueueP = 300 * time.Millisecond }, ChoiceLocal, ReasonLocalFaster},
		// 100 tokens behind 2 s of D's queue: P and the link take 11 ms, but
		// the KV then waits behind that queue all the same.
		{"short prompt behind D's queue stays local", Config{}, fastLink,
			func(in *Input) { in.PromptTokens = 100; in.QueueD = 2 * time.Second }, ChoiceLocal, ReasonLocalFaster},
		{"itl within target", Config{ITLSLO: 100 * time.Millisecond}, fastLink,
			itlCase, ChoiceLocal, ReasonLocalFaster},
		{"itl protect would break ttft", Config{ITLSLO: 50 * time.Millisecond, TTFTSLO: 500 * time.Millisecond}, fastLink,
			itlCase, ChoiceLocal, ReasonLocalFaster},
		{"no running decodes, nothing to protect", Config{ITLSLO: 50 * time.Millisecond}, fastLink,
			func(in *Input) { itlCase(in); in.RunningDecodesD = 0 }, ChoiceLocal, ReasonLocalFaster},
		{"1 GbE long prompt stays local", Config{}, 104e6,
			func(in *Input) { in.QueueD = 2 * time.Second }, ChoiceLocal, ReasonLocalFaster},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate(t, tt.cfg)
			if tt.bps > 0 {
				g.Links().ObserveProbe("p0", "d0", tt.bps, 200*time.Microsecond)
			}
			in := base
			if tt.edit != nil {
				tt.edit(&in)
			}
			d := g.Decide(in)
			if d.Choice != tt.wantChoice || d.Reason != tt.wantReason {
				t.Errorf("got %v\nwant %s (%s)", d, tt.wantChoice, tt.wantReason)
			}
			if d.Mode != g.Config().Mode {
				t.Errorf("decision mode %q, gate mode %q", d.Mode, g.Config().Mode)
			}
		})
	}
}

func itlCase(in *Input) {
	in.PromptTokens = 8000
	in.QueueD = 100 * time.Millisecond
	in.QueueP = 50 * time.Millisecond
	in.RunningDecodesD = 32
	in.DecodeStepD = 20 * time.Millisecond
	in.ChunkTokensD = 512
}

func TestStallModel(t *testing.T) {
	g := newGate(t, Config{})
	in := Input{PromptTokens: 8000, CachedD: 1000, PrefillD: linearPrefill(100 * time.Microsecond),
		RunningDecodesD: 4, DecodeStepD: 20 * time.Millisecond, ChunkTokensD: 512}
	d := g.Decide(in)
	// 7000 new tokens: 0.7 s over ⌈7000/512⌉ = 14 chunks = 50 ms a chunk.
	if d.StallD != 50*time.Millisecond || d.ITLD != 70*time.Millisecond {
		t.Errorf("stall %v, itl %v; want 50ms, 70ms", d.StallD, d.ITLD)
	}
	in.ChunkTokensD = 0
	if d := g.Decide(in); d.StallD != 700*time.Millisecond {
		t.Errorf("unchunked stall %v, want the whole 700ms prefill", d.StallD)
	}
}

func TestDecideDoesNotAllocate(t *testing.T) {
	g := newGate(t, Config{})
	g.Links().ObserveProbe("p0", "d0", 1e9, time.Millisecond)
	in := Input{PromptTokens: 4000, KVBytesPerToken: qwenKVBytes, PrefillD: linearPrefill(50 * time.Microsecond),
		PrefillP: linearPrefill(50 * time.Microsecond), QueueD: time.Second, Link: Link{"p0", "d0"}}
	if d := g.Decide(in); d.Choice != ChoiceRemote {
		t.Fatalf("setup: %v", d)
	}
	if allocs := testing.AllocsPerRun(1000, func() { g.Decide(in) }); allocs != 0 {
		t.Errorf("Decide allocates %.1f times per call, want 0", allocs)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	g := newGate(t, Config{Registerer: reg})
	// 2 s of prefill behind D's 1 s queue: remote (2 s) beats local (3 s).
	in := Input{PromptTokens: 2000, QueueD: time.Second, PrefillD: linearPrefill(time.Millisecond), PrefillP: linearPrefill(time.Millisecond), Link: Link{"p0", "d0"}}
	for range 3 {
		g.Decide(in)
	}
	m := gathered(t, reg, "switchyard_disagg_decisions_total", map[string]string{"mode": "auto", "choice": "local", "reason": "link_unmeasured"})
	if m == nil || m.GetCounter().GetValue() != 3 {
		t.Errorf("link_unmeasured decisions = %v, want 3", m)
	}
	g.Links().ObserveProbe("p0", "d0", 5e8, time.Millisecond)
	m = gathered(t, reg, "switchyard_link_throughput_bytes_per_second", map[string]string{"from": "p0", "to": "d0"})
	if m == nil || m.GetGauge().GetValue() != 5e8 {
		t.Errorf("link gauge = %v, want 5e8", m)
	}
	d := g.Decide(in)
	if d.Choice != ChoiceRemote {
		t.Fatalf("setup: %v", d)
	}
	g.Observe(d, d.Predicted()+250*time.Millisecond)
	g.Observe(d, d.Predicted()-30*time.Millisecond)
	m = gathered(t, reg, "switchyard_disagg_ttft_prediction_error_seconds", map[string]string{"choice": "remote"})
	h := m.GetHistogram()
	if h.GetSampleCount() != 2 || math.Abs(h.GetSampleSum()-0.22) > 1e-9 {
		t.Errorf("ttft error histogram count %d sum %v, want 2 and 0.22", h.GetSampleCount(), h.GetSampleSum())
	}
	for _, b := range h.GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= 0.25 {
			want = 2
		} else if b.GetUpperBound() >= -0.03 {
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	if _, err := New(Config{Registerer: reg}); err == nil {
		t.Error("registering the metrics twice succeeded")
	}
}

// gathered returns the metric of family name whose labels include want.
func gathered(t testing.TB, reg prometheus.Gatherer, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

func TestConfig(t *testing.T) {
	g := newGate(t, Config{})
	c := g.Config()
	if c.Mode != ModeAuto || c.Margin != DefaultMargin || c.TTFTSLO != DefaultTTFTSLO || c.ITLSLO != DefaultITLSLO ||
		c.EWMAAlpha != DefaultEWMAAlpha || c.ProbeBytes != DefaultProbeBytes {
		t.Errorf("defaults not applied: %+v", c)
	}
	if g := newGate(t, Config{Margin: -1}); g.Config().Margin != 0 {
		t.Errorf("negative margin = %v, want 0 (no margin)", g.Config().Margin)
	}
	for _, bad := range []Config{{Mode: "sometimes"}, {Margin: 1}, {EWMAAlpha: 1.5}} {
		if _, err := New(bad); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
	for _, s := range []string{"", "auto", "never", "always"} {
		if _, err := ParseMode(s); err != nil {
			t.Errorf("ParseMode(%q): %v", s, err)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	g := newGate(b, Config{})
	g.Links().ObserveProbe("p0", "d0", 1.2e9, 100*time.Microsecond)
	in := Input{PromptTokens: 4000, CachedD: 1024, KVBytesPerToken: qwenKVBytes,
		PrefillD: linearPrefill(50 * time.Microsecond), PrefillP: linearPrefill(50 * time.Microsecond),
		QueueD: time.Second, RunningDecodesD: 8, DecodeStepD: 15 * time.Millisecond, ChunkTokensD: 2048,
		Link: Link{"p0", "d0"}}
	if d := g.Decide(in); d.Choice != ChoiceRemote {
		b.Fatalf("setup: %v", d)
	}
	for b.Loop() {
		g.Decide(in)
	}
}

// TestLinkBacklog pins the link-sharing fix: a link already carrying earlier
// remote prefills' KV makes the next request stay local when the same
// request alone would go remote, and the link frees up as its backlog drains.
func TestLinkBacklog(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newGate(t, Config{Clock: func() time.Time { return now }})
	const bps = 1.25e9 // 10 Gbit/s
	g.Links().ObserveProbe("p0", "d0", bps, 0)
	// 1,000 tokens: 131 MB, 105 ms on the link; 500 ms to prefill on D,
	// 100 ms on P. Alone: remote 205 ms < 0.9 × 500 ms.
	in := Input{
		PromptTokens: 1000, KVBytesPerToken: llamaKVBytes,
		PrefillD: linearPrefill(500 * time.Microsecond), PrefillP: linearPrefill(100 * time.Microsecond),
		Link: Link{"p0", "d0"},
	}
	xfer := time.Duration(float64(1000*llamaKVBytes) / bps * float64(time.Second))
	for i := range 4 {
		d := g.Decide(in)
		if d.Choice != ChoiceRemote || d.Reason != ReasonRemoteFaster {
			t.Fatalf("request %d with %v already on the link: %s, want remote (remote_faster)", i, d.LinkBacklog, d)
		}
		if want := time.Duration(i) * xfer; !approx(d.LinkBacklog, want, 0.001) {
			t.Errorf("request %d: backlog %v, want %v", i, d.LinkBacklog, want)
		}
	}
	// Four transfers (420 ms) ahead: remote ≈ 420 + 105 ms > 450 ms.
	d := g.Decide(in)
	if d.Choice != ChoiceLocal || d.Reason != ReasonLocalFaster {
		t.Fatalf("fifth request behind 4 transfers: %s, want local (local_faster)", d)
	}
	if want := 5*xfer - 100*time.Millisecond; !approx(d.TransferTime, want, 0.001) {
		t.Errorf("transfer time %v, want %v (backlog beyond P's prefill + own bytes)", d.TransferTime, want)
	}
	// A what-if question assumes an idle link; a local choice commits nothing.
	if p := g.Predict(in); p.Choice != ChoiceRemote || p.LinkBacklog != 0 {
		t.Errorf("Predict: %s backlog %v, want remote on an idle link", p, p.LinkBacklog)
	}
	if b := g.Links().Backlog("p0"); !approx(b, 4*xfer, 0.001) {
		t.Errorf("backlog %v after a local choice, want %v", b, 4*xfer)
	}
	// Once the link has drained, the request goes remote again.
	now = now.Add(4 * xfer)
	if d := g.Decide(in); d.Choice != ChoiceRemote || d.LinkBacklog != 0 {
		t.Errorf("after the backlog drained: %s backlog %v, want remote", d, d.LinkBacklog)
	}
	g.Links().Forget("p0")
	if b := g.Links().Backlog("p0"); b != 0 {
		t.Errorf("backlog %v after Forget, want 0", b)
	}
}
