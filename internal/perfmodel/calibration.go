package perfmodel

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// CalibrationRow compares the model with one configuration of the splitwise
// measurements: the medians of its repeated runs against the prediction.
type CalibrationRow struct {
	GPU        string // our preset name
	TP         int
	PromptSize int
	BatchSize  int
	TokenSize  int
	Runs       int
	// Measured medians and predictions, in milliseconds. PromptMS is the
	// prefill of BatchSize prompts of PromptSize tokens in one step;
	// TokenMS is one decode step of BatchSize sequences.
	PromptMS, PredPromptMS float64
	TokenMS, PredTokenMS   float64
}

// splitwiseGPUs maps the CSV's hardware names to presets. The power-capped
// "h100-80gb-pcap" rows are not covered: no preset models a power cap.
var splitwiseGPUs = map[string]string{"a100-80gb": "a100-80g", "h100-80gb": "h100"}

// LoadCalibration reads splitwise_sim_perf_model.csv and returns one row per
// covered configuration (llama2-70b on A100/H100), sorted.
func LoadCalibration(path string) ([]CalibrationRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("perfmodel: calibration data: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("perfmodel: calibration header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, need := range []string{"model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time", "token_time", "tensor_parallel"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("perfmodel: calibration data lacks column %q", need)
		}
	}
	type key struct {
		gpu                 string
		tp, prompt, b, toks int
	}
	type obs struct{ prompt, token []float64 }
	groups := map[key]*obs{}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("perfmodel: calibration data: %w", err)
		}
		gpu, ok := splitwiseGPUs[rec[col["hardware"]]]
		if rec[col["model"]] != "llama2-70b" || !ok {
			continue
		}
		var k key
		k.gpu = gpu
		ints := []*int{&k.tp, &k.prompt, &k.b, &k.toks}
		for i, name := range []string{"tensor_parallel", "prompt_size", "batch_size", "token_size"} {
			if *ints[i], err = strconv.Atoi(rec[col[name]]); err != nil {
				return nil, fmt.Errorf("perfmodel: calibration %s: %w", name, err)
			}
		}
		pt, err1 := strconv.ParseFloat(rec[col["prompt_time"]], 64)
		tt, err2 := strconv.ParseFloat(rec[col["token_time"]], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("perfmodel: calibration times %q %q: bad number", rec[col["prompt_time"]], rec[col["token_time"]])
		}
		o := groups[k]
		if o == nil {
			o = &obs{}
			groups[k] = o
		}
		o.prompt = append(o.prompt, pt)
		o.token = append(o.token, tt)
	}
	m := models["llama-2-70b"]
	rows := make([]CalibrationRow, 0, len(groups))
	for k, o := range groups {
		p := NewProfile(m, gpus[k.gpu], k.tp)
		pre, dec := PredictSplitwise(&p, k.prompt, k.b, k.toks)
		rows = append(rows, CalibrationRow{
			GPU: k.gpu, TP: k.tp, PromptSize: k.prompt, BatchSize: k.b, TokenSize: k.toks, Runs: len(o.prompt),
			PromptMS: median(o.prompt), PredPromptMS: ms(pre),
			TokenMS: median(o.token), PredTokenMS: ms(dec),
		})
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.GPU != b.GPU {
			return a.GPU < b.GPU
		}
		if a.TP != b.TP {
			return a.TP < b.TP
		}
		if a.PromptSize != b.PromptSize {
			return a.PromptSize < b.PromptSize
		}
		if a.BatchSize != b.BatchSize {
			return a.BatchSize < b.BatchSize
		}
		return a.TokenSize < b.TokenSize
	})
	return rows, nil
}

// PredictSplitwise predicts what splitwise measured: the prefill of batch
// prompts of promptSize tokens in one step, and one decode step of batch
// sequences at the mean context of a tokenSize-token generation.
func PredictSplitwise(p *bus.Profile, promptSize, batch, tokenSize int) (prefill, decode float64) {
	var pw, dw Work
	for range batch {
		pw.Add(promptSize, 0)
		dw.Add(1, promptSize+tokenSize/2)
	}
	return StepSeconds(p, pw), StepSeconds(p, dw)
}

// MdAPE returns the median absolute percentage errors (as fractions) of the
// prompt and token predictions over rows.
func MdAPE(rows []CalibrationRow) (prompt, token float64) {
	var ep, et []float64
	for _, r := range rows {
		ep = append(ep, math.Abs(r.PredPromptMS-r.PromptMS)/r.PromptMS)
		et = append(et, math.Abs(r.PredTokenMS-r.TokenMS)/r.TokenMS)
	}
	return median(ep), median(et)
}

// CalibrationSummary is one (GPU, TP) line of the printable table.
type CalibrationSummary struct {
	GPU                     string
	TP                      int
	Configs                 int
	PromptMdAPE, TokenMdAPE float64
	// Representative points: a single 2,048-token prompt and a batch-1 decode.
	Prompt2K, PredPrompt2K float64
	Token1, PredToken1     float64
}

// Summarise groups rows by GPU and TP.
func Summarise(rows []CalibrationRow) []CalibrationSummary {
	var out []CalibrationSummary
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].GPU == rows[i].GPU && rows[j].TP == rows[i].TP {
			j++
		}
		g := rows[i:j]
		s := CalibrationSummary{GPU: g[0].GPU, TP: g[0].TP, Configs: len(g)}
		s.PromptMdAPE, s.TokenMdAPE = MdAPE(g)
		for _, r := range g {
			if r.PromptSize == 2048 && r.BatchSize == 1 {
				s.Prompt2K, s.PredPrompt2K = r.PromptMS, r.PredPromptMS
			}
			if r.PromptSize == 512 && r.BatchSize == 1 && r.TokenSize == 128 {
				s.Token1, s.PredToken1 = r.TokenMS, r.PredTokenMS
			}
		}
		out = append(out, s)
		i = j
	}
	return out
}

// WriteCalibrationTable prints the per-(GPU, TP) summary and the overall
// errors as a Markdown table, ready for the README.
func WriteCalibrationTable(w io.Writer, rows []CalibrationRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "| GPU\t| TP\t| configs\t| prompt MdAPE\t| token MdAPE\t| 2048-tok prompt ms (measured / model)\t| decode ms, batch 1 (measured / model)\t|")
	fmt.Fprintln(tw, "|---\t|---\t|---\t|---\t|---\t|---\t|---\t|")
	for _, s := range Summarise(rows) {
		fmt.Fprintf(tw, "| %s\t| %d\t| %d\t| %.1f%%\t| %.1f%%\t| %.0f / %.0f\t| %.1f / %.1f\t|\n",
			s.GPU, s.TP, s.Configs, 100*s.PromptMdAPE, 100*s.TokenMdAPE, s.Prompt2K, s.PredPrompt2K, s.Token1, s.PredToken1)
	}
	p, t := MdAPE(rows)
	fmt.Fprintf(tw, "| all\t| \t| %d\t| %.1f%%\t| %.1f%%\t| \t| \t|\n", len(rows), 100*p, 100*t)
	return tw.Flush()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ms(sec float64) float64 { return sec * 1e3 }
