package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// SchemaVersion names the JSON report format (docs/bench-schema.md).
const SchemaVersion = "switchyard-bench/v1"

// defaultBlockSize is used when /health does not say (the engine default).
const defaultBlockSize = 16

// Report is the outcome of one bench invocation: one Run per policy.
type Report struct {
	Schema     string      `json:"schema"`
	Scenario   Scenario    `json:"scenario"`
	URL        string      `json:"url"`
	Model      string      `json:"model"`
	StartedAt  time.Time   `json:"started_at"`
	Deployment Health      `json:"deployment"`
	BlockSize  int         `json:"block_size"`
	Settings   Settings    `json:"settings"`
	Runs       []PolicyRun `json:"runs"`
	// Simulation is set when switchyard simulate made the report: the
	// simulated cluster and what it cost. Times are then virtual.
	Simulation *Simulation `json:"simulation,omitempty"`
}

// Simulation describes the cluster a simulated report ran on, and its cost.
type Simulation struct {
	Model          string  `json:"model"`
	GPU            string  `json:"gpu"`
	TP             int     `json:"tp"`
	Workers        int     `json:"workers"`         // decode (or aggregated) workers
	PrefillWorkers int     `json:"prefill_workers"` // prefill-role workers
	GPUs           int     `json:"gpus"`            // (workers + prefill workers) × tp
	Router         string  `json:"router"`
	Disagg         string  `json:"disagg"`
	LinkRate       string  `json:"link_rate,omitempty"`
	LinkRTTS       float64 `json:"link_rtt_s,omitempty"`
	Speedup        float64 `json:"speedup"` // engine seconds per reported second, as up --speedup
	KVBlocks       int     `json:"kv_blocks"`
	// VirtualS is the simulated time from the first arrival to the last
	// completion, in reported seconds (duration_s of the run).
	VirtualS            float64 `json:"virtual_s"`
	GPUHourUSD          float64 `json:"gpu_hour_usd"`
	CostUSD             float64 `json:"cost_usd"`               // gpus × virtual_s / 3600 × gpu_hour_usd
	USDPerMillionTokens float64 `json:"usd_per_million_tokens"` // cost over prompt + completion tokens of successful requests
	USDPerMillionOutput float64 `json:"usd_per_million_output_tokens"`
	GoodputPerGPU       float64 `json:"goodput_per_gpu"` // goodput_rps ÷ gpus
	// Utilization is the share of the run's virtual time the workers
	// spent running steps, averaged over workers.
	Utilization float64 `json:"utilization"`
	// ITLSampleStride: the run's ITL percentiles use every n-th
	// inter-token gap (1 = all); per-request means and maxima use all.
	ITLSampleStride int   `json:"itl_sample_stride"`
	Events          int64 `json:"events"` // discrete events processed
	Steps           int64 `json:"steps"`  // engine steps run, over every worker
}

// Settings echoes the workload parameters into the report.
type Settings struct {
	Requests     int      `json:"requests,omitempty"`
	Prefixes     int      `json:"prefixes,omitempty"`
	PrefixTokens int      `json:"prefix_tokens,omitempty"`
	PrefixWords  int      `json:"prefix_words,omitempty"`
	SuffixTokens int      `json:"suffix_tokens,omitempty"`
	Warmup       int      `json:"warmup"`
	API          string   `json:"api,omitempty"` // the endpoint driven, when not completions
	PromptTokens []int    `json:"prompt_tokens,omitempty"`
	Repeats      int      `json:"repeats,omitempty"`
	Trace        string   `json:"trace,omitempty"`
	TraceFormat  string   `json:"trace_format,omitempty"`
	TimeScale    float64  `json:"time_scale,omitempty"`
	Skip         int      `json:"skip,omitempty"` // trace requests skipped before the slice
	MaxRequests  int      `json:"max_requests,omitempty"`
	MaxTokens    int      `json:"max_tokens,omitempty"`
	Concurrency  int      `json:"concurrency"`
	Rate         float64  `json:"rate"`
	Seed         int64    `json:"seed"`
	PrefixSizing string   `json:"prefix_sizing,omitempty"` // the prefix set against the deployment's KV capacity
	LoadEstimate string   `json:"load_estimate,omitempty"` // trace: the offered load against the deployment's capacity
	Policies     []string `json:"policies,omitempty"`
	DisaggModes  []string `json:"disagg_modes,omitempty"`
	LongShare    float64  `json:"long_share,omitempty"`
	LongTokens   int      `json:"long_tokens,omitempty"`
	TTFTSLOS     float64  `json:"ttft_slo_s"`
	ITLSLOS      float64  `json:"itl_slo_s"`
}

// PolicyRun is the measurement of one policy (or of the deployment as it was, with
// Policy empty).
type PolicyRun struct {
	Policy       string    `json:"policy"`
	DisaggMode   string    `json:"disagg_mode,omitempty"`   // set with --compare-disagg
	ResetWorkers *int      `json:"reset_workers,omitempty"` // workers whose cache was cleared first
	Aggregate    Aggregate `json:"aggregate"`
	Groups       []Group   `json:"groups,omitempty"` // disagg: one per prompt size
	Records      []Record  `json:"records"`          // warm-up first, then measured, by index
}

// Group is the aggregate of one prompt size (disagg) with the frontend's
// disaggregation decisions.
type Group struct {
	Key                 string         `json:"key"`
	Aggregate           Aggregate      `json:"aggregate"`
	DisaggReasons       map[string]int `json:"disagg_reasons"`
	PredictedTTFTMsMean *float64       `json:"predicted_ttft_ms_mean"`
}

// Run executes cfg against the deployment and returns the report. Progress
// goes to progress (nil for none). If ctx is cancelled midway, the partial
// report is returned with the error; requests never sent are counted as
// errors of kind "not_sent".
func Run(ctx context.Context, cfg Config, progress *Progress) (*Report, error) {
	if cfg.Scenario == ScenarioRouting {
		hc := NewClient(ClientConfig{URL: cfg.URL, APIKey: cfg.APIKey, AdminKey: cfg.AdminKey, MaxConns: 1, Timeout: cfg.Timeout})
		h, err := hc.Health(ctx)
		hc.Close()
		if err != nil {
			return nil, err
		}
		SizePrefixes(&cfg, h)
		progress.Note(cfg.PrefixSizing)
	}
	plan, err := BuildPlan(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Scenario == ScenarioTrace {
		hc := NewClient(ClientConfig{URL: cfg.URL, APIKey: cfg.APIKey, AdminKey: cfg.AdminKey, MaxConns: 1, Timeout: cfg.Timeout})
		h, err := hc.Health(ctx)
		hc.Close()
		if err != nil {
			return nil, err
		}
		if l, ok := EstimateLoad(plan.Items, h, cfg.TimeScale); ok {
			cfg.LoadEstimate = l.Warning
		} else {
			cfg.LoadEstimate = "the deployment reports no timing profiles, so the offered load cannot be compared with its capacity"
		}
		progress.Note(cfg.LoadEstimate)
	}
	c := NewClient(ClientConfig{URL: cfg.URL, APIKey: cfg.APIKey, AdminKey: cfg.AdminKey,
		MaxConns: max(plan.Concurrency, 64), Timeout: cfg.Timeout, API: cfg.API})
	defer c.Close()
	return runPlan(ctx, cfg, plan, c, progress)
}

func runPlan(ctx context.Context, cfg Config, plan Plan, c *Client, progress *Progress) (*Report, error) {
	rep := &Report{Schema: SchemaVersion, Scenario: cfg.Scenario, URL: cfg.URL, StartedAt: time.Now().UTC(),
		Settings: settingsOf(cfg, plan)}
	h, err := c.Health(ctx)
	if err != nil {
		return nil, err
	}
	rep.Deployment = h
	perToken := map[string]int64{}
	for _, w := range h.Workers {
		perToken[w.ID] = w.KVBytesPerToken
	}
	if why := h.NotFrontend(); why != "" {
		progress.Note(fmt.Sprintf("%s is not a Switchyard frontend: %s; requests go to it directly, without routing (point --url at the frontend to measure the deployment)", c.base, why))
		if len(cfg.Policies) > 0 || len(cfg.DisaggModes) > 0 {
			return nil, fmt.Errorf("bench: --compare-policies and --compare-disagg switch a frontend's settings, and %s is not a Switchyard frontend: %s", c.base, why)
		}
	}
	rep.BlockSize = cfg.BlockSize
	if rep.BlockSize == 0 {
		rep.BlockSize = h.BlockSize
	}
	if rep.BlockSize <= 0 {
		rep.BlockSize = defaultBlockSize
	}
	rep.Model = cfg.Model
	if rep.Model == "" {
		ids, err := c.Models(ctx)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("bench: GET /v1/models lists no model; pass --model")
		}
		rep.Model = ids[0]
	}
	c.SetModel(rep.Model)

	policies := cfg.Policies
	if len(policies) > 0 {
		st, err := c.Router(ctx)
		if err != nil {
			return nil, err
		}
		for _, p := range policies {
			if len(st.Policies) > 0 && !slices.Contains(st.Policies, p) {
				return nil, fmt.Errorf("bench: --compare-policies: the frontend has no policy %q (it has %s)", p, strings.Join(st.Policies, ","))
			}
		}
		defer func() {
			// Leave the deployment as we found it, even after a cancel.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adminTimeout)
			defer cancel()
			if rerr := c.SetPolicy(rctx, st.Policy); rerr != nil && err == nil {
				err = fmt.Errorf("bench: restore policy %q: %w", st.Policy, rerr)
			}
		}()
	} else {
		policies = []string{""}
	}
	modes := cfg.DisaggModes
	if len(modes) > 0 {
		st, err := c.Disagg(ctx)
		if err != nil {
			return nil, err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adminTimeout)
			defer cancel()
			if rerr := c.SetDisagg(rctx, st.Mode); rerr != nil && err == nil {
				err = fmt.Errorf("bench: restore disaggregation mode %q: %w", st.Mode, rerr)
			}
		}()
	} else {
		modes = []string{""}
	}
	type variant struct{ policy, mode string }
	var variants []variant
	for _, pol := range policies {
		for _, m := range modes {
			variants = append(variants, variant{pol, m})
		}
	}
	// Comparing modes alone, each run still says which policy served it.
	deployedPolicy := ""
	if len(cfg.Policies) == 0 && len(cfg.DisaggModes) > 0 {
		if st, err := c.Router(ctx); err == nil {
			deployedPolicy = st.Policy
		}
	}
	b := NewPromptBuilder(cfg.Seed)
	for _, v := range variants {
		pol := v.policy
		run := PolicyRun{Policy: pol, DisaggMode: v.mode}
		if pol == "" {
			run.Policy = deployedPolicy
		}
		if pol != "" {
			if err := c.SetPolicy(ctx, pol); err != nil {
				return rep, err
			}
		}
		if v.mode != "" {
			if err := c.SetDisagg(ctx, v.mode); err != nil {
				return rep, err
			}
		}
		if pol != "" || v.mode != "" || cfg.ResetCache {
			n, err := c.ResetCache(ctx)
			if err != nil {
				return rep, err
			}
			run.ResetWorkers = &n
		}
		label := string(cfg.Scenario)
		if pol != "" {
			label += " " + pol
		}
		if v.mode != "" {
			label += " disagg " + v.mode
		}
		warm, _, _ := dispatch(ctx, c, b, plan.Warmup, 1, false, progress, label+" warmup")
		for i := range warm {
			warm[i].Warmup = true
		}
		recs, wall, derr := dispatch(ctx, c, b, plan.Items, plan.Concurrency, plan.Open, progress, label)
		run.Records = append(warm, recs...)
		for i := range run.Records {
			markTransfer(&run.Records[i], perToken, rep.BlockSize)
			markHit(&run.Records[i], rep.BlockSize)
		}
		slo := SLO{TTFT: cfg.TTFTSLO, ITL: cfg.ITLSLO}
		run.Aggregate = Summarize(run.Records, wall.Seconds(), slo)
		if cfg.Scenario == ScenarioDisagg {
			run.Groups = groupBy(run.Records, wall.Seconds(), slo)
		}
		rep.Runs = append(rep.Runs, run)
		if derr != nil {
			return rep, derr
		}
	}
	return rep, err
}

// dispatch sends items, honouring arrival times when open and at most conc
// in flight (0 = unlimited), and returns one record per item plus the wall
// time from the first send to the last completion.
func dispatch(ctx context.Context, c *Client, b *PromptBuilder, items []Item, conc int, open bool,
	progress *Progress, label string) ([]Record, time.Duration, error) {
	recs := make([]Record, len(items))
	if len(items) == 0 {
		return recs, 0, nil
	}
	progress.Start(label, len(items))
	defer progress.Stop()
	var sem chan struct{}
	if conc > 0 {
		sem = make(chan struct{}, conc)
	}
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	sent := 0
send:
	for i := range items {
		if open {
			if d := items[i].At - time.Since(start); d > 0 {
				timer.Reset(d)
				select {
				case <-timer.C:
				case <-ctx.Done():
					break send
				}
			}
		}
		if sem != nil {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				break send
			}
		}
		if ctx.Err() != nil {
			break
		}
		sent++
		wg.Add(1)
		go func(it *Item, rec *Record) {
			defer wg.Done()
			rec.StartS = time.Since(start).Seconds()
			c.Complete(ctx, b, it, rec)
			if sem != nil {
				<-sem
			}
			progress.Add(rec.Outcome == OutcomeOK)
		}(&items[i], &recs[i])
	}
	wg.Wait()
	wall := time.Since(start)
	for i := sent; i < len(items); i++ {
		it := &items[i]
		recs[i] = Record{Index: it.Index, Group: it.Group, InputTokens: it.InputTokens, SharedTokens: it.SharedTokens, MaxTokens: it.MaxTokens}
		recs[i].fail(0, "not_sent", "run cancelled before this request was sent")
	}
	if sent < len(items) {
		return recs, wall, fmt.Errorf("bench: %s: stopped after %d of %d requests: %w", label, sent, len(items), context.Cause(ctx))
	}
	return recs, wall, nil
}

func groupBy(recs []Record, wall float64, slo SLO) []Group {
	var keys []string
	by := map[string][]Record{}
	for _, r := range recs {
		if r.Warmup {
			continue
		}
		if _, ok := by[r.Group]; !ok {
			keys = append(keys, r.Group)
		}
		by[r.Group] = append(by[r.Group], r)
	}
	var out []Group
	for _, k := range keys {
		g := Group{Key: k, Aggregate: Summarize(by[k], wall, slo), DisaggReasons: map[string]int{}}
		var sum float64
		var n int
		for _, r := range by[k] {
			if r.DisaggReason != "" {
				g.DisaggReasons[r.DisaggReason]++
			}
			if r.PredictedTTFTMs != nil {
				sum += *r.PredictedTTFTMs
				n++
			}
		}
		if n > 0 {
			m := sum / float64(n)
			g.PredictedTTFTMsMean = &m
		}
		// Per-size throughput over the whole sweep's wall time means nothing.
		g.Aggregate.RequestsPerS, g.Aggregate.GoodputRPS = 0, 0
		g.Aggregate.InputTokensPerS, g.Aggregate.OutputTokensPerS, g.Aggregate.DurationS = 0, 0, 0
		out = append(out, g)
	}
	return out
}

func settingsOf(cfg Config, plan Plan) Settings {
	s := Settings{Warmup: len(plan.Warmup), MaxTokens: cfg.MaxTokens, Concurrency: plan.Concurrency,
		Rate: cfg.Rate, Seed: cfg.Seed, Policies: cfg.Policies, DisaggModes: cfg.DisaggModes,
		TTFTSLOS: cfg.TTFTSLO.Seconds(), ITLSLOS: cfg.ITLSLO.Seconds()}
	if cfg.API != APICompletions {
		s.API = cfg.API
	}
	switch cfg.Scenario {
	case ScenarioRouting, ScenarioSelftest:
		s.Requests, s.Prefixes, s.SuffixTokens = cfg.Requests, cfg.Prefixes, cfg.SuffixTokens
		s.PrefixSizing = cfg.PrefixSizing
		if cfg.PrefixWords > 0 {
			s.PrefixWords = cfg.PrefixWords
		} else {
			s.PrefixTokens = cfg.PrefixTokens
		}
	case ScenarioDisagg:
		s.PromptTokens, s.Repeats = cfg.PromptTokens, cfg.Repeats
	case ScenarioTrace:
		s.Trace, s.TraceFormat, s.TimeScale, s.MaxRequests = cfg.TracePath, cfg.TraceFormat, cfg.TimeScale, cfg.MaxRequests
		s.Skip = cfg.Skip
		s.LongShare, s.LongTokens = cfg.LongShare, cfg.LongTokens
		s.LoadEstimate = cfg.LoadEstimate
		s.MaxTokens = 0 // from the trace
	}
	return s
}
