package preflight

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/internal/openai"
)

// idAgreement keeps the index-agreement check's prompts apart.
const idAgreement = 4_000

// agreementRequests is how many repeated-prefix chats each worker gets
// after the cold one: each is judged, and disagreement on half of them is
// systematic.
const agreementRequests = 8

// agreementWords is the shared system prompt's length in words (about
// 1.3 tokens each in a BPE tokenizer): several blocks, well inside any
// context.
const agreementWords = 160

// agreementVerdict judges one response as the frontend does (see its
// agree.go): blind when the engine served at least a block more than the
// index predicted, stale when it served at least a block less than the
// index predicted of what it could serve (an engine always computes a
// prompt's last token).
func agreementVerdict(predicted, cached, prompt, bs int) (blind, stale bool) {
	if cached >= predicted+bs {
		return true, false
	}
	want := predicted
	if prompt > 0 {
		want = min(want, (prompt-1)/bs*bs)
	}
	return false, cached+bs <= want
}

// checkAgreement sends each serving worker the same system prompt with a
// new question several times, as chats (so the frontend's tokenizer and
// chat template meet the engine's), and compares what the index predicted
// cached (x-switchyard-overlap-tokens, pinned: the index alone) with what
// the engine says it served (usage cached_tokens). It also reads the
// frontend's own running judgement from /health.
func (r *runner) checkAgreement(ctx context.Context) Check {
	ch := Check{Name: CheckAgreement, Status: Pass, Agreement: []AgreementProbe{}}
	var skipped []string
	for i, w := range r.dep.Workers {
		if w.Role == RolePrefill {
			skipped = append(skipped, w.ID)
			continue
		}
		p := r.agreementProbe(ctx, i, w)
		ch.Agreement = append(ch.Agreement, p)
	}
	frontend, err := r.settledAgreements(ctx)
	if err != nil {
		ch.Notes = append(ch.Notes, "could not read the frontend's own agreement from /health: "+err.Error())
	}
	bad := 0
	for i := range ch.Agreement {
		p := &ch.Agreement[i]
		if fa, ok := frontend[p.Worker]; ok {
			p.FrontendState = "consistent"
			if fa.Inconsistent {
				p.FrontendState, p.FrontendCause = "inconsistent", fa.Cause
			}
		}
		var why []string
		switch {
		case p.Error != "":
			p.Status = Fail
			why = append(why, p.Error)
		case p.Blind*2 >= p.Requests && p.Blind > 0:
			p.Status = Fail
			why = append(why, fmt.Sprintf("index blind on %d of %d repeated-prefix chats: the engine served %d cached tokens where the index predicted %d; likely cause: the worker's KV events are lost or undecodable, or the frontend tokenizes differently from the engine (see the tokenizer check; run the frontend with --tokenizer engine or the model's tokenizer.json)",
				p.Blind, p.Requests, p.CachedTokens, p.PredictedTokens))
		case p.Stale*2 >= p.Requests && p.Stale > 0:
			p.Status = Fail
			why = append(why, fmt.Sprintf("index stale on %d of %d repeated-prefix chats: the index predicted %d cached tokens where the engine served %d; likely cause: block removals do not reach the index (events dropped or removals skipped), or the worker's block size differs from the frontend's",
				p.Stale, p.Requests, p.PredictedTokens, p.CachedTokens))
		case p.Unreported > 0 && p.Requests == 0:
			p.Status = Warn
			why = append(why, "the engine's usage carries no prompt_tokens_details.cached_tokens, so what it served from cache cannot be compared with the index (vLLM: --enable-prompt-tokens-details)")
		case p.Requests == 0:
			p.Status = Warn
			why = append(why, "neither the index nor the engine reported a cached prefix on repeated chats: is prefix caching on? (see the prefix-cache check)")
		}
		if p.FrontendState == "inconsistent" {
			p.Status = Fail
			why = append(why, "the frontend finds its index inconsistent with this engine: "+p.FrontendCause)
		}
		if len(why) > 0 {
			ch.Problems = append(ch.Problems, p.Worker+": "+strings.Join(why, "; "))
		}
		if p.Status == Fail {
			bad++
		}
		ch.Status = worst(ch.Status, p.Status)
	}
	if len(skipped) > 0 {
		ch.Notes = append(ch.Notes, "prefill-role workers skipped (they never serve a client's chat): "+strings.Join(skipped, ", "))
	}
	if len(ch.Agreement) == 0 {
		ch.Status, ch.Summary = Fail, "no aggregated or decode worker to probe"
		return ch
	}
	ch.Summary = fmt.Sprintf("%d/%d workers' cache hits match the index's predictions on %d repeated-prefix chats each",
		len(ch.Agreement)-bad, len(ch.Agreement), agreementRequests)
	return ch
}

// settledAgreements reads the frontend's agreement once it has judged the
// probes: a blind response waits a grace for its KV events before the
// frontend counts it. The wait is bounded by the events deadline.
func (r *runner) settledAgreements(ctx context.Context) (map[string]agreementWire, error) {
	start := time.Now()
	for {
		ags, err := r.c.agreements(ctx)
		pending := 0
		for _, a := range ags {
			pending += a.Pending
		}
		if err != nil || pending == 0 || time.Since(start) >= r.cfg.EventsDeadline || !sleep(ctx, pollEvery) {
			return ags, err
		}
	}
}

func (r *runner) agreementProbe(ctx context.Context, i int, w Worker) AgreementProbe {
	p := AgreementProbe{Worker: w.ID, Role: w.Role, Status: Pass}
	shared := r.pb.WordText(idAgreement+i, agreementWords)
	chat := func(k int) []openai.Message {
		return []openai.Message{
			{Role: "system", Content: fmt.Sprintf("Agreement probe %d for %s. %s", r.cfg.Seed, w.ID, shared)},
			{Role: "user", Content: fmt.Sprintf("Question %d: what comes next?", k)},
		}
	}
	if _, err := r.c.chat(ctx, chat(0), w.ID, 2); err != nil {
		p.Error = err.Error()
		return p
	}
	// The index can only predict what its events brought in: wait (bounded)
	// for the shared prefix, which never comes when the index is blind.
	start := time.Now()
	for {
		l, err := r.c.lookupChat(ctx, chat(1))
		if err != nil || l.Overlaps[w.ID] > 0 || time.Since(start) >= r.cfg.EventsDeadline || !sleep(ctx, pollEvery) {
			break
		}
	}
	for k := 1; k <= agreementRequests; k++ {
		resp, err := r.c.chat(ctx, chat(k), w.ID, 2)
		if err != nil {
			p.Error = err.Error()
			return p
		}
		if resp.Overlap < 0 {
			p.Error = "the frontend sent no x-switchyard-overlap-tokens header: it cannot say what its index predicted"
			return p
		}
		if !resp.HasCached {
			p.Unreported++
			continue
		}
		if resp.Overlap == 0 && resp.CachedTokens == 0 {
			continue
		}
		p.Requests++
		p.PredictedTokens += resp.Overlap
		p.CachedTokens += resp.CachedTokens
		blind, stale := agreementVerdict(resp.Overlap, resp.CachedTokens, resp.PromptTokens, r.bs)
		if blind {
			p.Blind++
		}
		if stale {
			p.Stale++
		}
	}
	return p
}
