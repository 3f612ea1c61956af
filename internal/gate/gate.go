package gate

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Mode selects how the gate chooses.
type Mode string

// Modes.
const (
	ModeAuto   Mode = "auto"
	ModeNever  Mode = "never"
	ModeAlways Mode = "always"
)

// ParseMode parses "auto", "never" or "always"; "" means auto.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", ModeAuto:
		return ModeAuto, nil
	case ModeNever, ModeAlways:
		return Mode(s), nil
	}
	return "", fmt.Errorf("gate: mode %q: want auto, never or always", s)
}

// Choice is where prefill runs.
type Choice string

// Choices.
const (
	ChoiceLocal  Choice = "local"
	ChoiceRemote Choice = "remote"
)

// Reason explains a decision; it is a metric label and a response header.
type Reason string

// Reasons.
const (
	ReasonRemoteFaster    Reason = "remote_faster"
	ReasonITLProtect      Reason = "itl_protect"
	ReasonLocalFaster     Reason = "local_faster"
	ReasonLinkUnmeasured  Reason = "link_unmeasured"
	ReasonModeNever       Reason = "mode_never"
	ReasonModeAlways      Reason = "mode_always"
	ReasonNoPrefillWorker Reason = "no_prefill_worker"
	// ReasonNoProfile: a worker of the pair registered no timing profile
	// (a bridged engine started without --gpu), so neither path can be
	// priced and prefill stays local.
	ReasonNoProfile Reason = "no_timing_profile"
)

var (
	allModes   = []Mode{ModeAuto, ModeNever, ModeAlways}
	allChoices = []Choice{ChoiceLocal, ChoiceRemote}
	allReasons = []Reason{ReasonRemoteFaster, ReasonITLProtect, ReasonLocalFaster, ReasonLinkUnmeasured,
		ReasonModeNever, ReasonModeAlways, ReasonNoPrefillWorker, ReasonNoProfile}
)

// Defaults; the package comment says why.
const (
	DefaultMargin       = 0.1
	DefaultTTFTSLO      = 2 * time.Second
	DefaultITLSLO       = 100 * time.Millisecond
	DefaultProbeBytes   = 16 << 20
	DefaultEWMAAlpha    = 0.3
	DefaultProbeTimeout = 30 * time.Second
)

// Config configures a Gate. Zero fields take the defaults.
type Config struct {
	Mode Mode
	// Margin is the fraction by which remote must be predicted faster.
	// 0 means DefaultMargin; a negative value means no margin.
	Margin  float64
	TTFTSLO time.Duration
	ITLSLO  time.Duration
	// ProbeBytes is how much a link probe should move (the caller runs it).
	ProbeBytes int64
	// EWMAAlpha is the weight of a new transfer in the link estimate, (0, 1].
	EWMAAlpha float64
	// ProbeTimeout after which an unanswered probe counts as lost.
	ProbeTimeout time.Duration
	// Clock, for tests; default time.Now.
	Clock func() time.Time
	// Registerer for the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
}

// PrefillFunc predicts how long a worker takes to prefill newTokens on top
// of cachedTokens already in its cache.
type PrefillFunc func(newTokens, cachedTokens int) time.Duration

// Input is everything Decide needs about one request. Token counts are
// clamped to [0, PromptTokens].
type Input struct {
	// Mode overrides Config.Mode for this request ("" keeps it), so the
	// frontend can switch modes at run time.
	Mode            Mode
	PromptTokens    int
	CachedD         int // h_D: prompt tokens already cached on the decode worker
	CachedP         int // h_P: prompt tokens already cached on the prefill worker
	KVBytesPerToken int64
	QueueD, QueueP  time.Duration // predicted wait before the prefill starts
	PrefillD        PrefillFunc
	// PrefillP nil, or an empty Link.From, means there is no prefill
	// worker to use.
	PrefillP        PrefillFunc
	RunningDecodesD int           // decodes in flight on D
	DecodeStepD     time.Duration // D's current decode step time
	ChunkTokensD    int           // D's prefill chunk budget (max_num_batched_tokens); 0: unchunked
	Link            Link          // P → D
	// Unpriced names a worker of the pair with no timing profile; the
	// gate then cannot compare the paths and keeps prefill local.
	Unpriced string
}

// Decision is the gate's answer and its whole explanation.
type Decision struct {
	Mode   Mode
	Choice Choice
	Reason Reason
	// TLocal and TRemote are the predicted times to first token. TRemote
	// excludes the transfer when the link is unmeasured, and is never less
	// than D's queue (QueueD + DecodeStepD), which the KV lands behind.
	TLocal, TRemote time.Duration
	TransferBytes   int64         // (n − h_D) · kv_bytes_per_token
	TransferTime    time.Duration // TransferBytes / B + rtt + the link wait beyond P's own; 0 when unmeasured
	// LinkBacklog is how long the bytes earlier remote decisions committed
	// to P's link still need at rate B (Decide only; Predict assumes an
	// idle link).
	LinkBacklog     time.Duration
	StallD          time.Duration // extra ITL D's running decodes suffer under local prefill
	ITLD            time.Duration // D's predicted ITL during a local prefill
	LinkBytesPerSec float64
	RTT             time.Duration
	LinkMeasured    bool
}

// Predicted returns the predicted TTFT of the chosen path.
func (d Decision) Predicted() time.Duration {
	if d.Choice == ChoiceRemote {
		return d.TRemote
	}
	return d.TLocal
}

// String is a one-line explanation, e.g. for a response header.
func (d Decision) String() string {
	return fmt.Sprintf("%s (%s) t_local=%s t_remote=%s transfer=%dB/%s link=%.0fB/s",
		d.Choice, d.Reason, d.TLocal.Round(time.Microsecond), d.TRemote.Round(time.Microsecond),
		d.TransferBytes, d.TransferTime.Round(time.Microsecond), d.LinkBytesPerSec)
}

type counterKey struct {
	mode   Mode
	choice Choice
	reason Reason
}

// Gate makes disaggregation decisions. Safe for concurrent use.
type Gate struct {
	cfg     Config
	links   *LinkEstimator
	m       *metrics
	counter map[counterKey]prometheus.Counter // read-only after New
}

// New validates cfg, fills defaults and returns a Gate.
func New(cfg Config) (*Gate, error) {
	var err error
	if cfg.Mode, err = ParseMode(string(cfg.Mode)); err != nil {
		return nil, err
	}
	switch {
	case cfg.Margin == 0:
		cfg.Margin = DefaultMargin
	case cfg.Margin < 0:
		cfg.Margin = 0
	case cfg.Margin >= 1:
		return nil, fmt.Errorf("gate: margin %g: want less than 1", cfg.Margin)
	}
	if cfg.TTFTSLO <= 0 {
		cfg.TTFTSLO = DefaultTTFTSLO
	}
	if cfg.ITLSLO <= 0 {
		cfg.ITLSLO = DefaultITLSLO
	}
	if cfg.ProbeBytes <= 0 {
		cfg.ProbeBytes = DefaultProbeBytes
	}
	if cfg.EWMAAlpha == 0 {
		cfg.EWMAAlpha = DefaultEWMAAlpha
	}
	if cfg.EWMAAlpha < 0 || cfg.EWMAAlpha > 1 {
		return nil, fmt.Errorf("gate: ewma alpha %g: want (0, 1]", cfg.EWMAAlpha)
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	g := &Gate{cfg: cfg, m: m, counter: make(map[counterKey]prometheus.Counter)}
	// Resolve every counter now so Decide never builds label strings.
	for _, mo := range allModes {
		for _, c := range allChoices {
			for _, r := range allReasons {
				g.counter[counterKey{mo, c, r}] = m.decisions.WithLabelValues(string(mo), string(c), string(r))
			}
		}
	}
	g.links = newLinkEstimator(cfg.EWMAAlpha, cfg.ProbeTimeout, cfg.Clock, m.linkBPS)
	return g, nil
}

// Config returns the configuration with defaults filled in.
func (g *Gate) Config() Config { return g.cfg }

// Links returns the gate's link estimator.
func (g *Gate) Links() *LinkEstimator { return g.links }

// Decide chooses where to prefill and explains why. It does no I/O and does
// not allocate; it counts the decision in the metrics. It prices the
// transfer behind the bytes earlier remote decisions committed to P's link
// and, when it chooses remote on a measured link, commits this request's
// bytes there too, atomically, so concurrent requests see each other.
func (g *Gate) Decide(in Input) Decision {
	e := g.links
	e.mu.Lock()
	d := g.predict(in, true)
	if d.Choice == ChoiceRemote && d.LinkMeasured && d.TransferBytes > 0 {
		e.commitLocked(in.Link.From, time.Duration(float64(d.TransferBytes)/d.LinkBytesPerSec*float64(time.Second)))
	}
	e.mu.Unlock()
	g.counter[counterKey{d.Mode, d.Choice, d.Reason}].Inc()
	return d
}

func clamp(v, hi int) int { return max(0, min(v, hi)) }

// Predict is Decide without counting or committing the decision, on an
// idle link: for what-if questions such as preflight's disaggregation math.
func (g *Gate) Predict(in Input) Decision {
	g.links.mu.RLock()
	defer g.links.mu.RUnlock()
	return g.predict(in, false)
}

// predict is the model; the caller holds g.links.mu.
func (g *Gate) predict(in Input, backlog bool) Decision {
	n := max(0, in.PromptTokens)
	hD, hP := clamp(in.CachedD, n), clamp(in.CachedP, n)
	newD, newP := n-hD, n-hP
	d := Decision{Mode: g.cfg.Mode}
	if in.Mode != "" {
		d.Mode = in.Mode
	}

	var prefillD time.Duration
	if newD > 0 && in.PrefillD != nil {
		prefillD = in.PrefillD(newD, hD)
	}
	d.TLocal = in.QueueD + prefillD
	if in.RunningDecodesD > 0 && newD > 0 {
		k := 1
		if in.ChunkTokensD > 0 {
			k = (newD + in.ChunkTokensD - 1) / in.ChunkTokensD
		}
		d.StallD = prefillD / time.Duration(k)
	}
	d.ITLD = in.DecodeStepD + d.StallD

	hasP := in.PrefillP != nil && in.Link.From != ""
	if hasP {
		d.TransferBytes = int64(newD) * in.KVBytesPerToken
		var prefillP time.Duration
		if newP > 0 {
			prefillP = in.PrefillP(newP, hP)
		}
		wait := in.QueueP + prefillP
		d.TRemote = wait
		if s, ok := g.links.links[in.Link]; ok && s.measured {
			d.LinkBytesPerSec, d.RTT, d.LinkMeasured = s.bps, s.rtt, true
		}
		if d.LinkMeasured {
			if backlog {
				d.LinkBacklog = g.links.backlogLocked(in.Link.From)
			}
			// The bytes flow once P is done and the link has drained what
			// was committed before them, whichever is later.
			secs := float64(d.TransferBytes) / d.LinkBytesPerSec
			d.TransferTime = max(0, d.LinkBacklog-wait) + time.Duration(math.Min(secs, 1e9)*float64(time.Second)) + d.RTT
			d.TRemote += d.TransferTime
		}
		// The KV lands in D's queue, and D serves its queue in order: the
		// first token cannot come before D has finished the prefills queued
		// there now, then one step for the prompt's last token.
		d.TRemote = max(d.TRemote, in.QueueD+in.DecodeStepD)
	}

	switch {
	case !hasP:
		d.Choice, d.Reason = ChoiceLocal, ReasonNoPrefillWorker
	case d.Mode == ModeNever:
		d.Choice, d.Reason = ChoiceLocal, ReasonModeNever
	case d.Mode == ModeAlways:
		d.Choice, d.Reason = ChoiceRemote, ReasonModeAlways
	case in.Unpriced != "":
		d.Choice, d.Reason = ChoiceLocal, ReasonNoProfile
	case !d.LinkMeasured:
		d.Choice, d.Reason = ChoiceLocal, ReasonLinkUnmeasured
	case float64(d.TRemote) < (1-g.cfg.Margin)*float64(d.TLocal):
		d.Choice, d.Reason = ChoiceRemote, ReasonRemoteFaster
	case d.StallD > 0 && d.ITLD > g.cfg.ITLSLO && d.TRemote <= g.cfg.TTFTSLO &&
		(1-g.cfg.Margin)*float64(d.TRemote) <= float64(d.TLocal):
		d.Choice, d.Reason = ChoiceRemote, ReasonITLProtect
	default:
		d.Choice, d.Reason = ChoiceLocal, ReasonLocalFaster
	}
	return d
}

// Observe records how far a decision's predicted TTFT was from the measured
// one; the frontend calls it when the first token arrives.
func (g *Gate) Observe(d Decision, measuredTTFT time.Duration) {
	g.m.ttftError.WithLabelValues(string(d.Choice)).Observe((measuredTTFT - d.Predicted()).Seconds())
}
