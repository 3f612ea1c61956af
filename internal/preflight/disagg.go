package preflight

import (
	"context"
	"fmt"
	"strings"
)

// linkClass names the link class a measured throughput implies. The bands
// sit between the line rates of docs REFERENCES.md's link table: a TCP stream
// reaches 110–118 MB/s on 1 GbE (125 MB/s line rate), 1.1–1.2 GB/s on 10 GbE,
// ~2.8 GB/s on 25 GbE, 11–12 GB/s with RDMA on 100 GbE, and hundreds of GB/s
// on NVLink.
func linkClass(bytesPerSec float64) string {
	switch mb := bytesPerSec / 1e6; {
	case mb < 150:
		return "≤1 GbE"
	case mb < 1500:
		return "10 GbE"
	case mb < 3500:
		return "25 GbE"
	case mb < 15000:
		return "100 GbE / RDMA-class"
	default:
		return "NVLink-class"
	}
}

// pair is one prefill→decode combination the gate may choose.
type pair struct{ prefill, decode string }

// pairs lists prefill→decode pairs: every prefill worker with every decode
// worker, or with every aggregated worker when there are no decode workers.
func (r *runner) pairs() []pair {
	var pre, dec, agg []string
	for _, w := range r.dep.Workers {
		switch w.Role {
		case RolePrefill:
			pre = append(pre, w.ID)
		case RoleDecode:
			dec = append(dec, w.ID)
		default:
			agg = append(agg, w.ID)
		}
	}
	if len(dec) == 0 {
		dec = agg
	}
	var out []pair
	for _, p := range pre {
		for _, d := range dec {
			out = append(out, pair{p, d})
		}
	}
	return out
}

const noDisagg = "no disaggregation configured (no prefill-role workers)"

// checkLinks probes each pair's link so the disaggregation math that
// follows uses fresh numbers.
func (r *runner) checkLinks(ctx context.Context) Check {
	ch := Check{Name: CheckLinks, Status: Pass, Links: []Link{}}
	pairs := r.pairs()
	if len(pairs) == 0 {
		ch.Status, ch.Summary = Skip, noDisagg
		ch.Notes = append(ch.Notes, noDisagg)
		return ch
	}
	known := map[pair]linkWire{}
	if ls, err := r.c.links(ctx); err != nil {
		ch.Notes = append(ch.Notes, "GET /admin/links: "+err.Error())
	} else {
		for _, l := range ls {
			known[pair{l.From, l.To}] = l
		}
	}
	var parts []string
	for _, p := range pairs {
		l := Link{From: p.prefill, To: p.decode, Status: Pass, ProbeBytes: r.cfg.ProbeBytes}
		got, err := r.c.probeLink(ctx, p.prefill, p.decode, r.cfg.ProbeBytes)
		switch {
		case err != nil:
			l.Status, l.Error = Fail, err.Error()
		case got.BytesPerSec <= 0:
			l.Status, l.Error = Fail, fmt.Sprintf("probe reported %g bytes/s", got.BytesPerSec)
		default:
			l.ProbeSeconds, l.BytesPerSec, l.RTTMs, l.Emulated = got.Seconds, got.BytesPerSec, got.RTTMs, got.Emulated
			if got.Bytes > 0 {
				l.ProbeBytes = got.Bytes
			}
			if l.Emulated == "" {
				l.Emulated = known[p].Emulated
			}
			l.MBPerSec = got.BytesPerSec / 1e6
			l.Class = linkClass(got.BytesPerSec)
			parts = append(parts, fmt.Sprintf("%s→%s %.0f MB/s (%s)", p.prefill, p.decode, l.MBPerSec, classLabel(&l)))
		}
		if l.Status == Fail {
			ch.Problems = append(ch.Problems, fmt.Sprintf("%s→%s: link probe failed: %s", p.prefill, p.decode, l.Error))
		}
		ch.Status = worst(ch.Status, l.Status)
		ch.Links = append(ch.Links, l)
	}
	ch.Summary = fmt.Sprintf("%d/%d links measured", len(parts), len(pairs))
	if len(parts) > 0 {
		ch.Summary += ": " + strings.Join(parts, "; ")
	}
	return ch
}

func classLabel(l *Link) string {
	switch {
	case strings.Contains(l.Emulated, "emulated"):
		return l.Class + ", " + l.Emulated
	case l.Emulated != "":
		return l.Class + ", emulated " + l.Emulated
	}
	return l.Class
}

// Recommended --disagg settings.
const (
	DisaggNever  = "never"
	DisaggAuto   = "auto"
	DisaggAlways = "always"
)

// searchStart is the first length of the break-even doubling search.
const searchStart = 128

// checkDisagg reads the gate's predictions for each pair and searches the
// prompt length from which remote prefill pays.
func (r *runner) checkDisagg(ctx context.Context) Check {
	res := &DisaggResult{Mode: r.dep.Disagg, Pairs: []DisaggPair{}, Recommended: DisaggNever}
	ch := Check{Name: CheckDisagg, Status: Pass, Disagg: res}
	pairs := r.pairs()
	if len(pairs) == 0 {
		ch.Status, ch.Summary = Skip, noDisagg+"; recommended --disagg never"
		ch.Notes = append(ch.Notes, noDisagg)
		if res.Mode == DisaggAlways {
			ch.Status = Warn
			ch.Problems = append(ch.Problems, "--disagg always, but there is no prefill worker to disaggregate to")
		}
		return ch
	}
	d, err := r.c.disagg(ctx)
	if err != nil {
		ch.Status, ch.Summary = Fail, "cannot read the gate's settings"
		ch.Problems = append(ch.Problems, err.Error())
		return ch
	}
	res.Mode, res.Margin, res.TTFTSLOMs, res.ITLSLOMs = d.Mode, d.Margin, d.TTFTSLOMs, d.ITLSLOMs
	var recs []string
	for _, p := range pairs {
		dp, err := r.disaggPair(ctx, p, d.Margin)
		if err != nil {
			ch.Status = Fail
			ch.Problems = append(ch.Problems, fmt.Sprintf("%s→%s: %v", p.prefill, p.decode, err))
			continue
		}
		recs = append(recs, dp.Recommended)
		res.Pairs = append(res.Pairs, dp)
	}
	res.Recommended = combine(recs)
	var never []string
	for _, dp := range res.Pairs {
		if dp.BreakEvenTokens == nil {
			never = append(never, fmt.Sprintf("%s→%s at %.0f MB/s", dp.Prefill, dp.Decode, dp.LinkBytesPerSec/1e6))
		}
	}
	switch {
	case res.Mode == DisaggAlways && len(never) > 0:
		ch.Status = worst(ch.Status, Warn)
		ch.Problems = append(ch.Problems, fmt.Sprintf("--disagg always on links where remote prefill never pays (%s): every request pays the transfer; use --disagg %s",
			strings.Join(never, "; "), res.Recommended))
	case res.Mode == DisaggAlways && res.Recommended != DisaggAlways:
		ch.Status = worst(ch.Status, Warn)
		ch.Problems = append(ch.Problems, fmt.Sprintf("--disagg always, but remote prefill is slower for some prompt lengths; use --disagg %s", res.Recommended))
	case res.Mode == DisaggAuto && len(never) == len(res.Pairs) && len(res.Pairs) > 0:
		ch.Notes = append(ch.Notes, "--disagg auto keeps prefill local on these links (remote never pays), so it is safe; --disagg never says so explicitly")
	case res.Mode == DisaggNever && res.Recommended != DisaggNever:
		ch.Notes = append(ch.Notes, "remote prefill pays for long prompts on this deployment; --disagg auto would use it")
	}
	if res.Recommended == DisaggNever {
		searched := 0
		for _, dp := range res.Pairs {
			searched = max(searched, dp.SearchMaxTokens)
		}
		ch.Notes = append(ch.Notes, fmt.Sprintf("never: remote prefill adds TTFT at every length up to %s tokens; disaggregate only to isolate decode ITL from prefill, and measure that with `switchyard bench disagg`", thousands(searched)))
	}
	var be []string
	for _, dp := range res.Pairs {
		be = append(be, fmt.Sprintf("%s→%s %s", dp.Prefill, dp.Decode, dp.BreakEven))
	}
	ch.Summary = fmt.Sprintf("mode %s; remote prefill pays: %s; recommended --disagg %s", orDash(res.Mode), strings.Join(be, "; "), res.Recommended)
	return ch
}

// searchMax bounds the break-even search for p by the shorter context of
// its two workers: a prompt neither could take says nothing about the
// deployment.
func (r *runner) searchMax(p pair) int {
	n := r.cfg.MaxSearchTokens
	for _, w := range r.dep.Workers {
		if (w.ID == p.prefill || w.ID == p.decode) && w.MaxModelLen > 0 && w.MaxModelLen < n {
			n = w.MaxModelLen
		}
	}
	return n
}

func (r *runner) disaggPair(ctx context.Context, p pair, margin float64) (DisaggPair, error) {
	dp := DisaggPair{Prefill: p.prefill, Decode: p.decode, SearchMaxTokens: r.searchMax(p), Predictions: []Prediction{}}
	pw, err := r.c.predict(ctx, p.prefill, p.decode, r.cfg.PromptTokens)
	if err != nil {
		return dp, err
	}
	dp.LinkBytesPerSec, dp.LinkRTTMs = pw.Link.BytesPerSec, pw.Link.RTTMs
	allPay := true
	for _, pr := range pw.Predictions {
		pr.RemotePays = pays(pr.LocalTTFTS, pr.RemoteTTFTS, margin)
		allPay = allPay && pr.RemotePays
		dp.Predictions = append(dp.Predictions, pr)
	}
	be, err := r.breakEven(ctx, p, margin, dp.SearchMaxTokens)
	if err != nil {
		return dp, err
	}
	dp.BreakEvenTokens = be
	switch {
	case be == nil:
		dp.BreakEven, dp.Recommended = "never on this link", DisaggNever
	case allPay && *be <= searchStart:
		// Remote pays at every length asked for and from the search's
		// first point on: nothing tested favours local.
		dp.BreakEven, dp.Recommended = fmt.Sprintf("from %s tokens", thousands(*be)), DisaggAlways
	default:
		dp.BreakEven, dp.Recommended = fmt.Sprintf("from %s tokens", thousands(*be)), DisaggAuto
	}
	return dp, nil
}

// pays applies the gate's rule: remote only if it beats local by the margin.
func pays(local, remote, margin float64) bool { return remote < (1-margin)*local }

// breakEven finds the shortest prompt length for which remote prefill pays:
// one predict call for the doubling points searchStart, 2·searchStart, … up
// to MaxSearchTokens, then bisection to within one block. It assumes that
// once remote pays it keeps paying for longer prompts (prefill grows
// faster than linearly in length, the transfer linearly). nil means it
// never pays up to MaxSearchTokens.
func (r *runner) breakEven(ctx context.Context, p pair, margin float64, maxTokens int) (*int, error) {
	var points []int
	for n := min(searchStart, maxTokens); ; n *= 2 {
		points = append(points, min(n, maxTokens))
		if n >= maxTokens {
			break
		}
	}
	pw, err := r.c.predict(ctx, p.prefill, p.decode, points)
	if err != nil {
		return nil, err
	}
	lo, hi := 0, -1 // remote does not pay at lo (0 = untested), pays at hi
	for i, x := range pw.Predictions {
		if pays(x.LocalTTFTS, x.RemoteTTFTS, margin) {
			hi = points[i]
			break
		}
		lo = points[i]
	}
	if hi < 0 {
		return nil, nil
	}
	for hi-lo > max(1, r.bs) {
		mid := lo + (hi-lo)/2
		pw, err := r.c.predict(ctx, p.prefill, p.decode, []int{mid})
		if err != nil {
			return nil, err
		}
		if x := pw.Predictions[0]; pays(x.LocalTTFTS, x.RemoteTTFTS, margin) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return &hi, nil
}

// combine merges per-pair recommendations: one setting applies to all.
func combine(recs []string) string {
	if len(recs) == 0 {
		return DisaggNever
	}
	all := func(v string) bool {
		for _, r := range recs {
			if r != v {
				return false
			}
		}
		return true
	}
	switch {
	case all(DisaggNever):
		return DisaggNever
	case all(DisaggAlways):
		return DisaggAlways
	}
	return DisaggAuto
}
