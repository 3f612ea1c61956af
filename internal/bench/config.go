package bench

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Scenario names a workload.
type Scenario string

// The scenarios bench knows.
const (
	ScenarioRouting  Scenario = "routing"  // shared prefixes + unique suffixes
	ScenarioDisagg   Scenario = "disagg"   // prompt-size sweep, one request at a time
	ScenarioTrace    Scenario = "trace"    // replay of a Mooncake or Azure trace
	ScenarioSelftest Scenario = "selftest" // drive an in-process trivial server
)

// Trace formats.
const (
	FormatMooncake = "mooncake"
	FormatAzure    = "azure"
)

// Config is a validated bench run. The zero value is not valid; start from
// DefaultConfig and call Validate.
type Config struct {
	Scenario Scenario

	URL    string // frontend base URL, e.g. http://127.0.0.1:8000; several separated by commas spread the load
	Model  string // empty: the first id of GET /v1/models
	APIKey string // Authorization: Bearer for the OpenAI API
	// API is the endpoint driven: APICompletions (default), APIChat,
	// APIMessages or APIResponses.
	API      string
	AdminKey string // Authorization: Bearer for /admin/*; empty: APIKey

	// Routing scenario.
	Requests     int // measured requests (routing, selftest)
	Prefixes     int // K shared prefixes
	PrefixTokens int // prefix length in tokens (random token IDs); ignored if PrefixWords > 0
	PrefixWords  int // prefix length in English words (tokenized with cl100k)
	SuffixTokens int // unique suffix per request
	Warmup       int // warm-up requests before measuring, excluded from aggregates
	// AutoPrefixes sizes Prefixes from the deployment's KV capacity before
	// the run (SizePrefixes); the CLI sets it unless --prefixes is given.
	AutoPrefixes bool
	// PrefixSizing says how the prefix set compares with the deployment's
	// KV capacity; SizePrefixes sets it.
	PrefixSizing string
	// LoadEstimate compares a trace replay's offered load with the
	// deployment's capacity (EstimateLoad); Run sets it.
	LoadEstimate string

	autoWarmup bool // Warmup was defaulted to one per prefix

	// Disagg scenario.
	PromptTokens []int // sizes swept, in order
	Repeats      int   // requests per size

	// Trace scenario.
	TracePath   string
	TraceFormat string  // FormatMooncake or FormatAzure; "": InferTraceFormat
	TimeScale   float64 // multiplies the trace's timestamps (0.5 = twice as fast)
	Skip        int     // trace requests dropped before MaxRequests applies (SliceTrace)
	MaxRequests int     // 0: the whole trace
	// LongShare of the trace's requests (chosen deterministically from
	// Seed) get LongTokens input tokens instead of the trace's length, to
	// mix long prompts into a trace that has few.
	LongShare  float64
	LongTokens int

	MaxTokens   int           // completion length for routing, disagg and selftest
	Concurrency int           // in-flight limit; 0 means unlimited (trace only)
	Rate        float64       // Poisson arrivals per second; 0 = as fast as Concurrency allows
	Seed        int64         // every random choice derives from it
	Timeout     time.Duration // per request

	Policies   []string // compare these router policies; empty: run once as deployed
	ResetCache bool     // reset worker prefix caches before each run (always on with Policies or DisaggModes)
	// DisaggModes compares the frontend's disaggregation modes (never,
	// always, auto), switched with PUT /admin/disagg; empty: run once as
	// deployed. Exclusive with Policies.
	DisaggModes []string
	BlockSize   int // 0: from GET /health, else 16

	TTFTSLO time.Duration // goodput: TTFT at most this
	ITLSLO  time.Duration // goodput: the request's mean ITL at most this
}

// DefaultConfig returns the defaults the CLI starts from.
func DefaultConfig() Config {
	return Config{
		URL:          "http://127.0.0.1:8000",
		Requests:     60,
		Prefixes:     4,
		PrefixTokens: 2000,
		SuffixTokens: 16,
		Warmup:       -1, // one per prefix
		PromptTokens: []int{500, 1500, 3000},
		Repeats:      3,
		TimeScale:    1,
		MaxTokens:    16,
		Concurrency:  4,
		Seed:         1,
		Timeout:      5 * time.Minute,
		TTFTSLO:      2 * time.Second,
		ITLSLO:       100 * time.Millisecond,
	}
}

// maxPromptTokens bounds prompt sizes to something a frontend can take; the
// largest Mooncake request is ~128k tokens.
const maxPromptTokens = 1 << 20

// Validate checks cfg and fills derived defaults (Warmup = Prefixes when
// negative, AdminKey = APIKey when empty). Its errors say which flag to fix.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("bench: "+format, a...)) }
	switch c.Scenario {
	case ScenarioRouting, ScenarioDisagg, ScenarioTrace, ScenarioSelftest:
	default:
		bad("unknown scenario %q: use routing, disagg, trace or selftest", c.Scenario)
	}
	if c.API == "" {
		c.API = APICompletions
	}
	if !slices.Contains(APIs, c.API) {
		bad("--api %q: want one of %s", c.API, strings.Join(APIs, ", "))
	}
	if c.Scenario != ScenarioSelftest {
		urls := strings.Split(c.URL, ",")
		for i, raw := range urls {
			raw = strings.TrimRight(strings.TrimSpace(raw), "/")
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				bad("--url %q: want http://host:port, or several separated by commas", c.URL)
				break
			}
			urls[i] = raw
		}
		c.URL = strings.Join(urls, ",")
	}
	if c.AdminKey == "" {
		c.AdminKey = c.APIKey
	}
	if c.MaxTokens < 1 {
		bad("--max-tokens %d: want at least 1", c.MaxTokens)
	}
	if c.Concurrency < 0 || (c.Concurrency == 0 && c.Scenario != ScenarioTrace) {
		bad("--concurrency %d: want at least 1 (0 = unlimited is for trace only)", c.Concurrency)
	}
	if c.Rate < 0 {
		bad("--rate %g: want >= 0 (0 = no rate limit)", c.Rate)
	}
	if c.Timeout <= 0 {
		bad("--timeout %v: want > 0", c.Timeout)
	}
	if c.TTFTSLO <= 0 || c.ITLSLO <= 0 {
		bad("--ttft-slo and --itl-slo must be > 0")
	}
	if c.BlockSize < 0 {
		bad("--block-size %d: want >= 0 (0 = from /health)", c.BlockSize)
	}
	seen := map[string]bool{}
	for _, p := range c.Policies {
		if p == "" || seen[p] {
			bad("--compare-policies %q: empty or repeated policy name", strings.Join(c.Policies, ","))
			break
		}
		seen[p] = true
	}
	seen = map[string]bool{}
	for _, m := range c.DisaggModes {
		if (m != "never" && m != "always" && m != "auto") || seen[m] {
			bad("--compare-disagg %q: want distinct modes among never, always, auto", strings.Join(c.DisaggModes, ","))
			break
		}
		seen[m] = true
	}
	if len(c.DisaggModes) > 0 && len(c.Policies) > 0 {
		bad("give --compare-policies or --compare-disagg, not both")
	}
	if len(c.DisaggModes) > 0 && c.Scenario == ScenarioSelftest {
		bad("--compare-disagg needs a frontend: not for selftest")
	}
	if !(c.LongShare >= 0 && c.LongShare <= 1) {
		bad("--long-share %g: want a fraction in [0, 1]", c.LongShare)
	}
	if c.LongShare > 0 && (c.LongTokens < 1 || c.LongTokens > maxPromptTokens) {
		bad("--long-tokens %d: want 1..%d with --long-share", c.LongTokens, maxPromptTokens)
	}
	if c.LongShare > 0 && c.Scenario != ScenarioTrace {
		bad("--long-share is for the trace scenario")
	}
	if c.Skip != 0 && c.Scenario != ScenarioTrace {
		bad("--skip is for the trace scenario")
	}
	switch c.Scenario {
	case ScenarioRouting, ScenarioSelftest:
		if c.Requests < 1 {
			bad("--requests %d: want at least 1", c.Requests)
		}
	}
	switch c.Scenario {
	case ScenarioRouting:
		if c.Prefixes < 1 {
			bad("--prefixes %d: want at least 1", c.Prefixes)
		}
		if c.PrefixWords < 0 || c.PrefixTokens < 0 || (c.PrefixWords == 0 && c.PrefixTokens < 2) {
			bad("--prefix-tokens %d / --prefix-words %d: want a prefix of at least 2 tokens", c.PrefixTokens, c.PrefixWords)
		}
		if c.PrefixTokens > maxPromptTokens || c.PrefixWords > maxPromptTokens {
			bad("prefix too long: at most %d", maxPromptTokens)
		}
		if c.SuffixTokens < 1 || c.SuffixTokens > maxPromptTokens {
			bad("--suffix-tokens %d: want 1..%d (each request needs a unique suffix)", c.SuffixTokens, maxPromptTokens)
		}
		if c.Warmup < 0 {
			c.Warmup, c.autoWarmup = c.Prefixes, true
		}
	case ScenarioDisagg:
		if len(c.PromptTokens) == 0 {
			bad("--prompt-tokens: want a comma-separated list such as 500,1500,3000")
		}
		for _, n := range c.PromptTokens {
			if n < 2 || n > maxPromptTokens {
				bad("--prompt-tokens: size %d out of range 2..%d", n, maxPromptTokens)
			}
		}
		if c.Repeats < 1 {
			bad("--repeats %d: want at least 1", c.Repeats)
		}
	case ScenarioTrace:
		if c.TracePath == "" {
			bad("--trace: a trace file is required for the trace scenario")
		}
		if c.TraceFormat == "" {
			c.TraceFormat = InferTraceFormat(c.TracePath)
		}
		if c.TraceFormat != FormatMooncake && c.TraceFormat != FormatAzure {
			bad("--format %q: use mooncake or azure", c.TraceFormat)
		}
		if !(c.TimeScale > 0) {
			bad("--time-scale %g: want > 0", c.TimeScale)
		}
		if c.MaxRequests < 0 {
			bad("--max-requests %d: want >= 0 (0 = whole trace)", c.MaxRequests)
		}
		if c.Skip < 0 {
			bad("--skip %d: want >= 0 (0 = from the trace's start)", c.Skip)
		}
	}
	if c.Warmup < 0 {
		c.Warmup = 0
	}
	return errors.Join(errs...)
}
