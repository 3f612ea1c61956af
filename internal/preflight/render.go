package preflight

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes rep as indented JSON (docs/preflight-schema.md).
func WriteJSON(w io.Writer, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("preflight: encode report: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("preflight: write JSON: %w", err)
	}
	return nil
}

// section is one table of the report, rendered as text or Markdown.
type section struct {
	title  string
	lead   []string // lines before the table
	header []string
	rows   [][]string
	tail   []string // lines after the table
}

// sections lays the report out once for both renderers.
func sections(rep *Report) []section {
	sum := section{title: "Checks", header: []string{"check", "result", "summary"}}
	for _, c := range rep.Checks {
		sum.rows = append(sum.rows, []string{c.Name, string(c.Status), c.Summary})
	}
	out := []section{sum}
	for i := range rep.Checks {
		c := &rep.Checks[i]
		switch {
		case len(c.Events) > 0:
			s := section{title: "KV events", header: []string{"worker", "role", "state", "indexed after", "blocks", "gaps before→after", "last event", "result"}}
			for _, p := range c.Events {
				idx := "never"
				if p.IndexedAfterS != nil {
					idx = ms(*p.IndexedAfterS)
				}
				age := "-"
				if p.LastEventAgeS >= 0 && p.State != "" {
					age = ms(p.LastEventAgeS) + " ago"
				}
				s.rows = append(s.rows, []string{p.Worker, p.Role, orDash(p.State), idx,
					fmt.Sprintf("%d/%d", p.IndexedBlocks, p.ProbeBlocks), fmt.Sprintf("%d→%d", p.GapsBefore, p.GapsAfter), age, string(p.Status)})
			}
			out = append(out, s)
		case len(c.Tokenizer) > 0:
			s := section{title: "Tokenizer", header: []string{"worker", "probe", "frontend tokens", "worker tokens", "first difference", "result"}}
			for _, p := range c.Tokenizer {
				d := "-"
				if p.FirstDiff >= 0 {
					d = fmt.Sprintf("at %d: %s", p.FirstDiff, p.Detail)
				} else if p.Detail != "" {
					d = p.Detail
				}
				s.rows = append(s.rows, []string{p.Worker, p.Probe, strconv.Itoa(p.FrontendTokens), strconv.Itoa(p.WorkerTokens), d, string(p.Status)})
			}
			out = append(out, s)
		case len(c.Agreement) > 0:
			s := section{title: "Index agreement", header: []string{"worker", "role", "judged", "index predicted", "engine cached", "blind", "stale", "frontend", "result"}}
			for _, p := range c.Agreement {
				s.rows = append(s.rows, []string{p.Worker, p.Role, strconv.Itoa(p.Requests), strconv.Itoa(p.PredictedTokens), strconv.Itoa(p.CachedTokens),
					strconv.Itoa(p.Blind), strconv.Itoa(p.Stale), orDash(p.FrontendState), string(p.Status)})
			}
			out = append(out, s)
		case len(c.Prefix) > 0:
			s := section{title: "Same-prefix probe", header: []string{"worker", "role", "prompt", "cold TTFT", "warm TTFT", "warm/cold", "cached cold/warm", "need", "result"}}
			for _, p := range c.Prefix {
				s.rows = append(s.rows, []string{p.Worker, p.Role, strconv.Itoa(p.PromptTokens), ms(p.ColdTTFTS), ms(p.WarmTTFTS),
					fmt.Sprintf("%.2f", p.WarmOverCold), fmt.Sprintf("%d/%d", p.ColdCached, p.WarmCached), strconv.Itoa(p.FullBlockTokens), string(p.Status)})
			}
			out = append(out, s)
		case c.Routing != nil:
			r := c.Routing
			s := section{title: "Routing", header: []string{"policy", "prefixes × tokens", "requests", "hits", "hit ratio", "expected", "fail below", "mean TTFT", "workers"}}
			s.rows = append(s.rows, []string{orDash(r.Policy), fmt.Sprintf("%d × %d", r.Prefixes, r.PrefixTokens), strconv.Itoa(r.Requests),
				strconv.Itoa(r.Hits), fmt.Sprintf("%.2f", r.HitRatio), fmt.Sprintf("%.2f", r.ExpectedHitRatio), fmt.Sprintf("%.2f", r.MinHitRatio),
				ms(r.MeanTTFTS), countsLine(r.Workers)})
			out = append(out, s)
		case len(c.Links) > 0:
			s := section{title: "Links", header: []string{"from", "to", "MB/s", "RTT ms", "class", "emulated", "probe", "result"}}
			for _, l := range c.Links {
				s.rows = append(s.rows, []string{l.From, l.To, fmt.Sprintf("%.1f", l.MBPerSec), fmt.Sprintf("%.2f", l.RTTMs), orDash(l.Class),
					orDash(l.Emulated), fmt.Sprintf("%s in %.2fs", mib(l.ProbeBytes), l.ProbeSeconds), string(l.Status)})
			}
			out = append(out, s)
		case c.Disagg != nil && len(c.Disagg.Pairs) > 0:
			d := c.Disagg
			for _, p := range d.Pairs {
				s := section{title: fmt.Sprintf("Disaggregation %s→%s", p.Prefill, p.Decode),
					lead: []string{fmt.Sprintf("link %.1f MB/s, RTT %.2f ms; mode %s, margin %.2f (remote pays when remote < (1 − margin) × local)",
						p.LinkBytesPerSec/1e6, p.LinkRTTMs, orDash(d.Mode), d.Margin)},
					header: []string{"prompt tokens", "KV MB", "added transfer", "local TTFT", "remote TTFT", "remote pays", "gate"}}
				for _, x := range p.Predictions {
					s.rows = append(s.rows, []string{thousands(x.PromptTokens), fmt.Sprintf("%.1f", float64(x.KVBytes)/1e6), secs(x.TransferS),
						secs(x.LocalTTFTS), secs(x.RemoteTTFTS), yesNo(x.RemotePays), gateLabel(x.Choice, x.Reason)})
				}
				s.tail = []string{fmt.Sprintf("remote prefill pays: %s (searched up to %s tokens); recommended --disagg %s",
					p.BreakEven, thousands(p.SearchMaxTokens), p.Recommended)}
				out = append(out, s)
			}
		}
	}
	return out
}

// WriteTable writes the human report: the deployment line, the checks, one
// table per check with details, the problems and notes, and the verdict.
func WriteTable(w io.Writer, rep *Report) error {
	ew := &errWriter{w: w}
	d := &rep.Deployment
	fmt.Fprintf(ew, "switchyard preflight  %s  model %s  block %d  policy %s  disagg %s\n", rep.URL, orDash(d.Model), d.BlockSize, orDash(d.Policy), orDash(d.Disagg))
	fmt.Fprintf(ew, "deployment: status %s, %d workers\n", orDash(d.Status), len(d.Workers))
	for _, s := range sections(rep) {
		fmt.Fprintf(ew, "\n%s\n", s.title)
		for _, l := range s.lead {
			fmt.Fprintf(ew, "  %s\n", l)
		}
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  %s\n", strings.ToUpper(strings.Join(s.header, "\t")))
		for _, r := range s.rows {
			fmt.Fprintf(tw, "  %s\n", strings.Join(r, "\t"))
		}
		_ = tw.Flush()
		for _, l := range s.tail {
			fmt.Fprintf(ew, "  %s\n", l)
		}
	}
	problems, notes := findings(rep)
	if len(problems) > 0 {
		fmt.Fprintln(ew, "\nProblems")
		for _, p := range problems {
			fmt.Fprintf(ew, "  %s\n", p)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(ew, "\nNotes")
		for _, n := range notes {
			fmt.Fprintf(ew, "  %s\n", n)
		}
	}
	fmt.Fprintf(ew, "\nverdict: %s\n", verdictLine(rep))
	if ew.err != nil {
		return fmt.Errorf("preflight: write table: %w", ew.err)
	}
	return nil
}

// WriteMarkdown writes the report as Markdown for a change request.
func WriteMarkdown(w io.Writer, rep *Report) error {
	ew := &errWriter{w: w}
	d := &rep.Deployment
	fmt.Fprintf(ew, "# Switchyard preflight: %s\n\n", rep.Verdict)
	fmt.Fprintf(ew, "- frontend: `%s`, started %s, took %.1f s\n", rep.URL, rep.StartedAt.Format("2006-01-02 15:04:05Z07:00"), rep.DurationS)
	fmt.Fprintf(ew, "- model `%s`, block size %d, routing policy `%s`, `--disagg %s`\n", orDash(d.Model), d.BlockSize, orDash(d.Policy), orDash(d.Disagg))
	fmt.Fprintf(ew, "- deployment status `%s`, %d workers\n", orDash(d.Status), len(d.Workers))
	fmt.Fprintf(ew, "- verdict: **%s**\n", mdEscape(verdictLine(rep)))
	for _, s := range sections(rep) {
		fmt.Fprintf(ew, "\n## %s\n\n", s.title)
		for _, l := range s.lead {
			fmt.Fprintf(ew, "%s\n\n", mdEscape(l))
		}
		fmt.Fprintf(ew, "| %s |\n|%s\n", strings.Join(s.header, " | "), strings.Repeat(" --- |", len(s.header)))
		for _, r := range s.rows {
			cells := make([]string, len(r))
			for i, c := range r {
				cells[i] = mdEscape(c)
			}
			fmt.Fprintf(ew, "| %s |\n", strings.Join(cells, " | "))
		}
		for _, l := range s.tail {
			fmt.Fprintf(ew, "\n%s\n", mdEscape(l))
		}
	}
	problems, notes := findings(rep)
	if len(problems) > 0 {
		fmt.Fprint(ew, "\n## Problems\n\n")
		for _, p := range problems {
			fmt.Fprintf(ew, "- %s\n", mdEscape(p))
		}
	}
	if len(notes) > 0 {
		fmt.Fprint(ew, "\n## Notes\n\n")
		for _, n := range notes {
			fmt.Fprintf(ew, "- %s\n", mdEscape(n))
		}
	}
	if ew.err != nil {
		return fmt.Errorf("preflight: write markdown: %w", ew.err)
	}
	return nil
}

// findings flattens every check's problems and notes, each prefixed with
// its check (and the problem's severity).
func findings(rep *Report) (problems, notes []string) {
	for _, c := range rep.Checks {
		for _, p := range c.Problems {
			problems = append(problems, fmt.Sprintf("%s %s: %s", c.Status, c.Name, p))
		}
		for _, n := range c.Notes {
			notes = append(notes, c.Name+": "+n)
		}
	}
	return problems, notes
}

// subjects names what a failed check's problems are about, when each
// problem starts with an id ("worker-2: ..."), so the verdict names it.
func subjects(problems []string) string {
	var ids []string
	for _, p := range problems {
		id, _, ok := strings.Cut(p, ": ")
		if !ok || strings.ContainsAny(id, " \t") || slices.Contains(ids, id) {
			continue
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return ""
	}
	return " (" + strings.Join(ids, ", ") + ")"
}

// verdictLine says the overall result and which checks caused it.
func verdictLine(rep *Report) string {
	var failed, warned []string
	for _, c := range rep.Checks {
		switch c.Status {
		case Fail:
			failed = append(failed, c.Name+subjects(c.Problems))
		case Warn:
			warned = append(warned, c.Name)
		}
	}
	s := string(rep.Verdict)
	if len(failed) > 0 {
		s += " — failed: " + strings.Join(failed, ", ")
	}
	if len(warned) > 0 {
		s += " — warnings: " + strings.Join(warned, ", ")
	}
	skipped := 0
	for _, c := range rep.Checks {
		if c.Status == Skip {
			skipped++
		}
	}
	switch {
	case len(failed)+len(warned) == 0 && skipped == 0:
		s += fmt.Sprintf(" — all %d checks passed", len(rep.Checks))
	case len(failed)+len(warned) == 0:
		s += fmt.Sprintf(" — %d checks passed, %d skipped (nothing to examine)", len(rep.Checks)-skipped, skipped)
	}
	return s
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func gateLabel(choice, reason string) string {
	if reason == "" {
		return orDash(choice)
	}
	return fmt.Sprintf("%s (%s)", orDash(choice), reason)
}

// ms formats seconds as milliseconds.
func ms(s float64) string { return fmt.Sprintf("%.1f ms", s*1000) }

// secs formats seconds, with ms precision below one second.
func secs(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// thousands formats n with comma separators: 131072 → "131,072".
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// countsLine renders a count map as "a 2, b 1", largest first.
func countsLine(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// ratioRange renders the min and max of ratios.
func ratioRange(r []float64) string {
	if len(r) == 0 {
		return "-"
	}
	lo, hi := r[0], r[0]
	for _, v := range r {
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo == hi {
		return fmt.Sprintf("%.2f", lo)
	}
	return fmt.Sprintf("%.2f–%.2f", lo, hi)
}
