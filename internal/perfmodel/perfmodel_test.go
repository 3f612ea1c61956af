package perfmodel

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"
)

var splitwiseCSV = filepath.Join("..", "..", "..", "shared", "data", "traces", "splitwise_sim_perf_model.csv")

func TestCalibration(t *testing.T) {
	rows, err := LoadCalibration(splitwiseCSV)
	if err != nil {
		t.Fatal(err)
	}
	// 19 configurations per (GPU, TP), 2 GPUs × 3 TP degrees.
	if got, want := len(rows), 2*3*19; got != want {
		t.Fatalf("covered configurations = %d, want %d", got, want)
	}
	for _, s := range Summarise(rows) {
		if s.PromptMdAPE > 0.25 || s.TokenMdAPE > 0.25 {
			t.Errorf("%s TP%d: MdAPE prompt %.1f%% token %.1f%%, want both ≤ 25%%", s.GPU, s.TP, 100*s.PromptMdAPE, 100*s.TokenMdAPE)
		}
	}
	p, tok := MdAPE(rows)
	if p > 0.25 || tok > 0.25 {
		t.Errorf("overall MdAPE prompt %.1f%% token %.1f%%, want ≤ 25%%", 100*p, 100*tok)
	}
	var buf bytes.Buffer
	if err := WriteCalibrationTable(&buf, rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("calibration against splitwise llama2-70b:\n%s", buf.String())
}

func TestKVBytesPerToken(t *testing.T) {
	tests := []struct {
		model string
		want  int
	}{
		{"qwen3-0.6b", 114688},
		{"llama-3.1-8b", 131072},
		{"qwen3-32b", 262144},
		{"llama-3.1-70b", 327680},
		{"llama-2-70b", 327680},
	}
	for _, tt := range tests {
		m, err := LookupModel(tt.model)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.KVBytesPerToken(); got != tt.want {
			t.Errorf("%s: KV bytes/token = %d, want %d", tt.model, got, tt.want)
		}
	}
}

func TestDefaultTP(t *testing.T) {
	tests := []struct {
		model, gpu string
		want       int // 0: does not fit
	}{
		{"qwen3-0.6b", "rtx-4060", 1},
		{"llama-3.1-8b", "l4", 1},
		{"llama-3.1-8b", "rtx-4060", 4},
		{"llama-3.1-70b", "h100", 4},
		{"qwen3-32b", "a100-80g", 2},
		{"llama-3.1-70b", "rtx-4060", 0},
	}
	for _, tt := range tests {
		m, _ := LookupModel(tt.model)
		g, _ := LookupGPU(tt.gpu)
		got, err := DefaultTP(m, g, 0.9)
		if tt.want == 0 {
			if err == nil {
				t.Errorf("%s on %s: TP %d, want an error", tt.model, tt.gpu, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s on %s: TP %d (%v), want %d", tt.model, tt.gpu, got, err, tt.want)
		}
	}
}

func TestPrefillSanity(t *testing.T) {
	m, _ := LookupModel("qwen3-0.6b")
	g, _ := LookupGPU("rtx-4060")
	p := NewProfile(m, g, 1)
	p.MaxBatchTokens = 8192
	got := PrefillTime(&p, 3000, 0)
	if got < 100*time.Millisecond || got > 300*time.Millisecond {
		t.Errorf("3000-token prefill = %v, want 100-300 ms", got)
	}
	// Attention is quadratic: doubling the prompt more than doubles the time
	// beyond the overhead, and cached context makes new tokens dearer.
	if a, b := PrefillTime(&p, 16000, 0), 2*PrefillTime(&p, 8000, 0); a <= b {
		t.Errorf("prefill(16000) = %v, want > 2×prefill(8000) = %v", a, b)
	}
	if a, b := PrefillTime(&p, 1000, 8000), PrefillTime(&p, 1000, 0); a <= b {
		t.Errorf("prefill(1000 after 8000 cached) = %v, want > prefill(1000) = %v", a, b)
	}
	if got := PrefillTime(&p, 0, 500); got != 0 {
		t.Errorf("prefill of nothing = %v, want 0", got)
	}
	// Chunking: 10,000 tokens take two steps, so two overheads.
	if a, b := PrefillTime(&p, 10000, 0), StepTime(&p, func() Work { var w Work; w.Add(10000, 0); return w }()); a <= b {
		t.Errorf("chunked prefill %v, want more than one unchunked step %v", a, b)
	}
}

func TestDecodeIsBandwidthBound(t *testing.T) {
	m, _ := LookupModel("llama-3.1-8b")
	g, _ := LookupGPU("h100")
	p := NewProfile(m, g, 1)
	var w Work
	w.Add(1, 1000)
	got := StepSeconds(&p, w)
	memory := (m.WeightBytes() + 1001*float64(m.KVBytesPerToken())) / (g.MemBandwidth * g.MBU)
	if want := memory + p.StepOverheadSec; got != want {
		t.Errorf("decode step = %g s, want the memory time %g s", got, want)
	}
}

// dynamoMockerPrefillMS is the prefill cost of NVIDIA Dynamo's simulator
// ("mocker"), for the comparison REFERENCES.md asks for: T is the new tokens
// in the batch. It has no notion of GPU, model or tensor parallelism.
func dynamoMockerPrefillMS(t float64) float64 { return 4.21e-7*t*t + 1.518e-2*t + 16.5 }

// TestRooflineBeatsDynamoMocker: on the measured splitwise prompt times, the
// roofline model's error is lower than a fixed-formula simulator's.
func TestRooflineBeatsDynamoMocker(t *testing.T) {
	rows, err := LoadCalibration(splitwiseCSV)
	if err != nil {
		t.Fatal(err)
	}
	var ours, mocker []float64
	for _, r := range rows {
		ours = append(ours, abs(r.PredPromptMS-r.PromptMS)/r.PromptMS)
		m := dynamoMockerPrefillMS(float64(r.PromptSize * r.BatchSize))
		mocker = append(mocker, abs(m-r.PromptMS)/r.PromptMS)
	}
	o, m := median(ours), median(mocker)
	t.Logf("prompt-time MdAPE over %d configs: roofline %.1f%%, Dynamo mocker formula %.1f%%", len(rows), 100*o, 100*m)
	if o >= m {
		t.Errorf("roofline MdAPE %.1f%% not below the mocker's %.1f%%", 100*o, 100*m)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
