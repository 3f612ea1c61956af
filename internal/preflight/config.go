package preflight

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Config is what Run needs. Build it from DefaultConfig and validate it with
// Validate (Run does too).
type Config struct {
	URL      string // frontend base URL, e.g. http://127.0.0.1:8000
	APIKey   string // sent on /v1/* requests through the router
	AdminKey string // sent on /admin/* and pinned requests; empty = APIKey

	Timeout time.Duration // per request

	// Model is the model to check in a frontend that serves several: its
	// workers alone are checked, and its requests name it. "" checks the
	// frontend's one model.
	Model string

	// PromptTokens are the prompt lengths the disaggregation math reports.
	PromptTokens []int
	// MinHitRatio is the routing hit ratio below which the routing check
	// fails; below 1.0 it warns.
	MinHitRatio float64
	// ProbeBytes is the size of each link probe.
	ProbeBytes int64

	// ProbeTokens is the prompt length of the same-prefix probe. Long enough
	// that a cold prefill is clearly slower than a cached one: on the
	// simulated qwen3-0.6b, 2,000 tokens cold take 13 ms on an h100 preset
	// against 8.5 ms warm (126 ms vs 9.5 ms on rtx-4060), too close on a busy
	// host, so the default doubles it.
	ProbeTokens int
	// RoutingPrefixes shared prefixes of RoutingPrefixTokens tokens, then
	// RoutingRequests requests with unique RoutingSuffixTokens-token suffixes.
	RoutingPrefixes     int
	RoutingPrefixTokens int
	RoutingRequests     int
	RoutingSuffixTokens int

	// EventsDeadline is how long after a probe's response its stored blocks
	// may take to appear in the index, and the maximum heartbeat age.
	EventsDeadline time.Duration
	// MaxSearchTokens bounds the break-even search.
	MaxSearchTokens int

	// Seed makes the probe prompts; 0 picks one from the clock so that every
	// run's prompts are new to every cache.
	Seed int64
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		URL:                 "http://127.0.0.1:8000",
		Timeout:             60 * time.Second,
		PromptTokens:        []int{1500, 3000, 6000},
		MinHitRatio:         0.8,
		ProbeBytes:          64 << 20,
		ProbeTokens:         4000,
		RoutingPrefixes:     3,
		RoutingPrefixTokens: 1000,
		RoutingRequests:     12,
		RoutingSuffixTokens: 32,
		EventsDeadline:      2 * time.Second,
		MaxSearchTokens:     128 << 10,
	}
}

// Validate reports every invalid field at once, naming the flag at fault.
func (c *Config) Validate() error {
	var errs []error
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--url %q: want http://host:port", c.URL))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %v: must be positive", c.Timeout))
	}
	if len(c.PromptTokens) == 0 {
		errs = append(errs, errors.New("--prompt-tokens: give at least one length"))
	}
	for _, n := range c.PromptTokens {
		if n < 1 || n > c.MaxSearchTokens {
			errs = append(errs, fmt.Errorf("--prompt-tokens %d: want 1..%d", n, c.MaxSearchTokens))
		}
	}
	if c.MinHitRatio < 0 || c.MinHitRatio > 1 {
		errs = append(errs, fmt.Errorf("--min-hit-ratio %g: want 0..1", c.MinHitRatio))
	}
	if c.ProbeBytes < 1 {
		errs = append(errs, fmt.Errorf("--probe-bytes %d: must be positive", c.ProbeBytes))
	}
	if c.ProbeTokens < 2 {
		errs = append(errs, fmt.Errorf("--probe-tokens %d: want at least 2", c.ProbeTokens))
	}
	if c.RoutingPrefixes < 1 || c.RoutingRequests < 1 || c.RoutingPrefixTokens < 1 || c.RoutingSuffixTokens < 1 {
		errs = append(errs, errors.New("routing workload: prefixes, requests, prefix and suffix tokens must be positive"))
	}
	if c.EventsDeadline <= 0 {
		errs = append(errs, errors.New("events deadline must be positive"))
	}
	if c.MaxSearchTokens < 2 {
		errs = append(errs, errors.New("max search tokens must be at least 2"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("preflight: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

func (c *Config) adminKey() string {
	if c.AdminKey != "" {
		return c.AdminKey
	}
	return c.APIKey
}
