package bench

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0..100) of sorted, interpolating
// linearly between the two nearest ranks (numpy's default "linear" method).
// It returns NaN for an empty sample.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 100 {
		return sorted[n-1]
	}
	rank := p / 100 * float64(n-1)
	lo := int(math.Floor(rank))
	hi := min(lo+1, n-1)
	frac := rank - float64(lo)
	return sorted[lo] + frac*(sorted[hi]-sorted[lo])
}

// Quantiles is p50/p90/p99 of one latency, in seconds; nil when there was
// no sample (JSON null, "-" in tables).
type Quantiles struct {
	P50 *float64 `json:"p50_s"`
	P90 *float64 `json:"p90_s"`
	P99 *float64 `json:"p99_s"`
	N   int      `json:"n"`
}

func quantiles(xs []float64) Quantiles {
	q := Quantiles{N: len(xs)}
	if len(xs) == 0 {
		return q
	}
	slices.Sort(xs)
	at := func(p float64) *float64 { v := Percentile(xs, p); return &v }
	q.P50, q.P90, q.P99 = at(50), at(90), at(99)
	return q
}

// SLO is the goodput criterion: a request is good when it succeeded, its
// TTFT is at most TTFT and its mean inter-token latency is at most ITL
// (requests with a single content chunk have no ITL and pass that half).
// The mean rather than the max is used so one scheduler hiccup in a long
// stream does not discard an otherwise fine request; the max is recorded per
// request for anyone who wants the stricter rule.
type SLO struct {
	TTFT time.Duration
	ITL  time.Duration
}

// Aggregate summarises the measured requests of one run. Rejections and
// errors stay in the denominator of every rate.
type Aggregate struct {
	Requests   int            `json:"requests"`
	OK         int            `json:"ok"`
	Rejected   int            `json:"rejected"`
	Errors     int            `json:"errors"`
	ErrorKinds map[string]int `json:"error_kinds"`

	DurationS        float64 `json:"duration_s"`
	RequestsPerS     float64 `json:"requests_per_s"`      // successful requests ÷ wall time
	InputTokensPerS  float64 `json:"input_tokens_per_s"`  // prompt tokens of successful requests ÷ wall time
	OutputTokensPerS float64 `json:"output_tokens_per_s"` // completion tokens ÷ wall time

	TTFT Quantiles `json:"ttft"`
	ITL  Quantiles `json:"itl"` // over every inter-token gap of every successful request
	E2E  Quantiles `json:"e2e"`
	// Flat copies of the headline figures, for jq and dashboards.
	TTFTP50S *float64 `json:"ttft_p50_s"`
	TTFTP99S *float64 `json:"ttft_p99_s"`
	ITLP50S  *float64 `json:"itl_p50_s"`

	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	HitRatio     float64 `json:"hit_ratio"` // cached ÷ prompt tokens over successful requests
	// TransferredTokens is the KV pulled from prefill workers over
	// successful requests: computed remotely, so not in the hit ratio.
	TransferredTokens int `json:"transferred_tokens"`
	Hits              int `json:"cache_hits"`
	HitEligible       int `json:"cache_hit_eligible"` // requests with a shared prefix of ≥ 1 full block
	// Tiers is set when workers reported KV tiers (see Record.KVTiers).
	Tiers *TierStats `json:"tiers,omitempty"`

	GoodRequests int     `json:"good_requests"`
	GoodputRPS   float64 `json:"goodput_rps"` // good requests ÷ wall time
	TTFTSLOS     float64 `json:"ttft_slo_s"`
	ITLSLOS      float64 `json:"itl_slo_s"`

	PrefillLocal  int            `json:"prefill_local"`
	PrefillRemote int            `json:"prefill_remote"`
	Workers       map[string]int `json:"workers"` // requests per x-switchyard-worker
}

// TierStats splits the cache hits of a run by KV tier.
type TierStats struct {
	// HitRatio is cached ÷ prompt tokens per tier, over the successful
	// requests that reported tiers; they sum to the run's hit ratio there.
	HitRatio TierValues `json:"hit_ratio"`
	// LoadedBytes is the KV loaded into GPU memory from each lower tier.
	LoadedBytes TierValues `json:"loaded_bytes"`
	// TTFTByHit is the TTFT of requests grouped by the slowest tier their
	// hit used: miss (nothing cached), gpu, cpu, disk.
	TTFTByHit map[string]Quantiles `json:"ttft_by_hit_tier"`
	Requests  map[string]int       `json:"requests_by_hit_tier"`
}

// TierValues is one number per KV tier.
type TierValues struct {
	GPU  float64 `json:"gpu"`
	CPU  float64 `json:"cpu"`
	Disk float64 `json:"disk"`
}

// HitTier is the slowest tier r's cache hit came from: "miss", "gpu",
// "cpu" or "disk"; "" when r carries no tier split.
func (r *Record) HitTier() string {
	t := r.KVTiers
	switch {
	case t == nil:
		return ""
	case t.DiskTokens > 0:
		return "disk"
	case t.CPUTokens > 0:
		return "cpu"
	case t.GPUTokens > 0:
		return "gpu"
	}
	return "miss"
}

// tierStats summarises the successful records that report tiers; nil when
// none do.
func tierStats(recs []Record) *TierStats {
	var ts TierStats
	var prompt, gpu, cpu, disk int
	ttft := map[string][]float64{}
	for i := range recs {
		r := &recs[i]
		if r.Warmup || r.Outcome != OutcomeOK || r.KVTiers == nil {
			continue
		}
		t := r.KVTiers
		prompt += r.PromptTokens
		gpu, cpu, disk = gpu+t.GPUTokens, cpu+t.CPUTokens, disk+t.DiskTokens
		ts.LoadedBytes.CPU += float64(t.CPULoadedBytes)
		ts.LoadedBytes.Disk += float64(t.DiskLoadedBytes)
		ttft[r.HitTier()] = append(ttft[r.HitTier()], r.TTFTS)
	}
	if len(ttft) == 0 {
		return nil
	}
	if prompt > 0 {
		p := float64(prompt)
		ts.HitRatio = TierValues{GPU: float64(gpu) / p, CPU: float64(cpu) / p, Disk: float64(disk) / p}
	}
	ts.TTFTByHit, ts.Requests = map[string]Quantiles{}, map[string]int{}
	for k, v := range ttft {
		ts.TTFTByHit[k], ts.Requests[k] = quantiles(v), len(v)
	}
	return &ts
}

// Summarize aggregates recs (warm-up records are skipped) over wall seconds
// of wall-clock time.
func Summarize(recs []Record, wall float64, slo SLO) Aggregate {
	a := Aggregate{ErrorKinds: map[string]int{}, Workers: map[string]int{}, DurationS: wall,
		TTFTSLOS: slo.TTFT.Seconds(), ITLSLOS: slo.ITL.Seconds()}
	// Sized before they fill: appending a million-request simulation's
	// inter-token gaps (hundreds of millions) by doubling copied and zeroed
	// each one about twice, and peaked at three times their size.
	var gaps int
	for i := range recs {
		if r := &recs[i]; !r.Warmup && r.Outcome == OutcomeOK {
			gaps += len(r.itls)
		}
	}
	ttft, e2e := make([]float64, 0, len(recs)), make([]float64, 0, len(recs))
	itl := make([]float64, 0, gaps)
	var in, out int
	for i := range recs {
		r := &recs[i]
		if r.Warmup {
			continue
		}
		a.Requests++
		if r.HitEligible {
			a.HitEligible++
		}
		if r.Worker != "" {
			a.Workers[r.Worker]++
		}
		switch r.Prefill {
		case "local":
			a.PrefillLocal++
		case "remote":
			a.PrefillRemote++
		}
		switch r.Outcome {
		case OutcomeRejected:
			a.Rejected++
			a.ErrorKinds[r.ErrorKind]++
			continue
		case OutcomeOK:
		default:
			a.Errors++
			a.ErrorKinds[r.ErrorKind]++
			continue
		}
		a.OK++
		ttft = append(ttft, r.TTFTS)
		itl = append(itl, r.itls...)
		e2e = append(e2e, r.E2ES)
		in += r.PromptTokens
		out += r.CompletionTokens
		a.PromptTokens += r.PromptTokens
		a.CachedTokens += r.CachedTokens
		a.TransferredTokens += r.TransferredTokens
		if r.CacheHit {
			a.Hits++
		}
		if r.TTFTS <= slo.TTFT.Seconds() && (r.Chunks < 2 || r.ITLMeanS <= slo.ITL.Seconds()) {
			a.GoodRequests++
		}
	}
	a.TTFT, a.ITL, a.E2E = quantiles(ttft), quantiles(itl), quantiles(e2e)
	a.Tiers = tierStats(recs)
	a.TTFTP50S, a.TTFTP99S, a.ITLP50S = a.TTFT.P50, a.TTFT.P99, a.ITL.P50
	if a.PromptTokens > 0 {
		a.HitRatio = float64(a.CachedTokens) / float64(a.PromptTokens)
	}
	if wall > 0 {
		a.RequestsPerS = float64(a.OK) / wall
		a.InputTokensPerS = float64(in) / wall
		a.OutputTokensPerS = float64(out) / wall
		a.GoodputRPS = float64(a.GoodRequests) / wall
	}
	return a
}

// markHit decides whether r is a cache-hit candidate and whether it hit: a
// request with a shared prefix of at least one full block hits when the
// deployment reports at least that many full blocks cached.
func markHit(r *Record, blockSize int) {
	full := r.SharedTokens / blockSize * blockSize
	r.HitEligible = full > 0
	r.CacheHit = r.HitEligible && r.Outcome == OutcomeOK && r.CachedTokens >= full
}

// markTransfer moves the KV r's decode worker pulled from a remote prefill
// out of r's cached tokens into its transferred tokens. The worker counts
// pulled blocks as cached (vLLM's num_cached_tokens does too), which made
// a run with every prefill remote report a hit ratio near 1. perToken is
// each worker's kv_bytes_per_token from GET /health.
func markTransfer(r *Record, perToken map[string]int64, blockSize int) {
	if r.Prefill != "remote" || r.KVBytes == nil || r.Outcome != OutcomeOK {
		return
	}
	bpt := perToken[r.Worker]
	if bpt <= 0 {
		return
	}
	r.TransferredTokens = int(*r.KVBytes / bpt)
	local := LocalCachedTokens(r.CachedTokens, r.PromptTokens, r.TransferredTokens, blockSize)
	if t := r.KVTiers; t != nil { // pulled blocks land in GPU memory
		c := *t
		c.GPUTokens = max(0, c.GPUTokens-(r.CachedTokens-local))
		r.KVTiers = &c
	}
	r.CachedTokens = local
}

// LocalCachedTokens is the part of a decode worker's reported cached
// tokens it held before pulling transferred tokens of the prompt's full
// blocks from a remote prefill. The pull fetches every full block the
// worker lacked, so it held the rest; an engine never reports the block
// holding the prompt's last token as cached (it must compute that token),
// so cached alone can be below what it held, and subtracting the pull
// from it would count a hit as a miss.
func LocalCachedTokens(cached, prompt, transferred, blockSize int) int {
	held := max(0, prompt/max(blockSize, 1)*max(blockSize, 1)-transferred)
	return min(cached, held)
}
