package bridge

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// discover waits for the engine's GET /v1/models and checks it against the
// configured model and max_model_len.
func (b *Bridge) discover(ctx context.Context) (model string, maxLen int, err error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.StartTimeout)
	defer cancel()
	var lastErr error
	lastLog := time.Time{}
	for {
		var em engineModels
		em, lastErr = b.models(ctx)
		model, maxLen = em.base, em.maxLen
		b.names = em
		if lastErr == nil {
			break
		}
		if time.Since(lastLog) > 10*time.Second {
			b.log.Info("waiting for the engine", "err", lastErr)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return "", 0, fmt.Errorf("bridge: engine at %s not ready within %v: %w (is --engine-url right and the engine up?)", b.cfg.EngineURL, b.cfg.StartTimeout, lastErr)
		case <-time.After(250 * time.Millisecond):
		}
	}
	if b.cfg.Model != "" && b.cfg.Model != model {
		return "", 0, fmt.Errorf("bridge: --model %q but the engine at %s serves %q: fix one of them", b.cfg.Model, b.cfg.EngineURL, model)
	}
	if b.cfg.MaxModelLen > 0 && maxLen > 0 && b.cfg.MaxModelLen != maxLen {
		return "", 0, fmt.Errorf("bridge: --max-model-len %d but the engine at %s reports %d: fix one of them", b.cfg.MaxModelLen, b.cfg.EngineURL, maxLen)
	}
	if maxLen == 0 {
		maxLen = b.cfg.MaxModelLen
	}
	return model, maxLen, nil
}

// engineModels is what an engine's GET /v1/models lists: its model, the
// other names it serves it under, and its LoRA adapters.
type engineModels struct {
	base     string
	maxLen   int
	aliases  []string
	adapters []bus.Adapter
}

// sameNames reports whether m and o serve the same names.
func (m engineModels) sameNames(o engineModels) bool {
	return m.base == o.base && slices.Equal(m.aliases, o.aliases) && slices.Equal(m.adapters, o.adapters)
}

func (b *Bridge) models(ctx context.Context) (engineModels, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.EngineURL+"/v1/models", nil)
	if b.cfg.WorkerKey != "" {
		// The frontend presents the worker key on the engine's /v1, so an
		// engine started with --api-key set to it admits the two of us.
		req.Header.Set("Authorization", "Bearer "+b.cfg.WorkerKey)
	}
	var m engineModels
	resp, err := b.cfg.HTTPClient.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("GET /v1/models: %s", resp.Status)
	}
	var list struct {
		Data []struct {
			ID          string  `json:"id"`
			MaxModelLen int     `json:"max_model_len"`
			Root        string  `json:"root"`
			Parent      *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return m, fmt.Errorf("GET /v1/models: %w", err)
	}
	if len(list.Data) == 0 {
		return m, fmt.Errorf("GET /v1/models: no model")
	}
	// vLLM lists the served names first (the first is the model), then
	// the LoRA adapters, each with its base as parent.
	m.base, m.maxLen = list.Data[0].ID, list.Data[0].MaxModelLen
	for _, d := range list.Data[1:] {
		switch {
		case d.ID == "" || d.ID == m.base:
		case d.Parent != nil && *d.Parent != "":
			m.adapters = append(m.adapters, bus.Adapter{Name: d.ID, Root: d.Root})
		default:
			m.aliases = append(m.aliases, d.ID)
		}
	}
	return m, nil
}

// refreshNames re-reads the engine's served names every every and, when
// they changed (an adapter loaded or unloaded at run time), puts the new
// registry entry at once. A failed read keeps the names as they were: the
// engine's health is the load reporter's to tell.
func (b *Bridge) refreshNames(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		m, err := b.models(ctx)
		if err != nil {
			continue
		}
		b.mu.Lock()
		// b.names is what the engine listed last, registered or not, so
		// that a change (another model is one) is acted on and logged
		// once, not at every refresh.
		same := m.sameNames(b.names)
		b.names = m
		if !same && m.base == b.info.Model {
			b.info.Aliases, b.info.Adapters = m.aliases, m.adapters
		}
		info := b.info
		b.mu.Unlock()
		switch {
		case same:
		case m.base != info.Model:
			b.log.Warn("the engine now serves another model; restart the bridge to register it", "registered", info.Model, "engine", m.base)
		default:
			b.log.Info("engine's served names changed", "aliases", m.aliases, "adapters", len(m.adapters))
			b.errMu.Lock()
			reg := b.reg
			b.errMu.Unlock()
			if reg != nil {
				if err := reg.Update(ctx, info); err != nil {
					b.log.Warn("registry update failed; the next refresh puts it", "err", err)
				}
			}
		}
	}
}

// Metric names by engine.
type metricNames struct {
	running, waiting, usage, usageOld string
}

var engineMetrics = map[string]metricNames{
	EngineVLLM:   {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
	EngineSGLang: {"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", ""},
}

// scrape reads the engine's /metrics and /health once and returns a load
// report; it also keeps both in the status.
func (b *Bridge) scrape(ctx context.Context) bus.LoadReport {
	r := bus.LoadReport{WorkerID: b.cfg.ID, UnixNano: time.Now().UnixNano()}
	up := b.healthy(ctx)
	vals, capBlocks, lora, err := b.metrics(ctx)
	if err == nil {
		r.LoRA = lora
		n := engineMetrics[b.cfg.Engine]
		r.Running = int(vals[n.running])
		r.Waiting = int(vals[n.waiting])
		u, ok := vals[n.usage]
		if !ok && n.usageOld != "" {
			u = vals[n.usageOld]
		}
		r.KVUsage = u
		r.TotalBlocks = capBlocks
		r.UsedBlocks = int(u * float64(capBlocks))
		// Engines do not export their queued prefill tokens or decode
		// blocks; the blocks in use stand for the decode load.
		r.ActiveDecodeBlocks = r.UsedBlocks
	}
	b.mu.Lock()
	b.st.EngineUp = up
	d := b.driftLocked()
	r.Drift = &d
	restarted := false
	if err == nil {
		b.st.Load = r
		if st, ok := vals["process_start_time_seconds"]; ok && st > 0 {
			restarted = b.started != 0 && st != b.started
			b.started = st
		}
	}
	b.mu.Unlock()
	if restarted {
		select {
		case b.restarts <- struct{}{}:
		default:
		}
	}
	return r
}

func (b *Bridge) healthy(ctx context.Context) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.EngineURL+"/health", nil)
	resp, err := b.cfg.HTTPClient.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// metrics fetches /metrics and sums each sample name over its label sets.
// capBlocks is the KV capacity in blocks when the engine says it (vLLM's
// cache_config_info num_gpu_blocks label; SGLang's max_total_num_tokens).
func (b *Bridge) metrics(ctx context.Context) (vals map[string]float64, capBlocks int, lora *bus.LoRAState, err error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.EngineURL+"/metrics", nil)
	resp, err := b.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	vals, labels := ParseMetrics(io.LimitReader(resp.Body, 16<<20))
	if l, ok := labels[loraInfoMetric]; ok {
		lora = &bus.LoRAState{Running: adapterList(l["running_lora_adapters"]), Waiting: adapterList(l["waiting_lora_adapters"])}
		lora.Max, _ = strconv.Atoi(l["max_lora"])
	}
	if v, ok := labels["vllm:cache_config_info"]["num_gpu_blocks"]; ok {
		capBlocks, _ = strconv.Atoi(v)
	}
	if t, ok := vals["sglang:max_total_num_tokens"]; ok && b.cfg.BlockSize > 0 {
		capBlocks = int(t) / b.cfg.BlockSize
	}
	return vals, capBlocks, lora, nil
}

// loraInfoMetric is vLLM's LoRA state: a gauge whose labels are the state
// and whose value is when it began, one series per state it has been in.
const loraInfoMetric = "vllm:lora_requests_info"

// adapterList splits a lora_requests_info label's comma-separated names.
func adapterList(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// ParseMetrics reads Prometheus text exposition: it sums the values of each
// sample name over its label sets (so data-parallel ranks add up) and keeps
// the labels of each name's last sample (of vllm:lora_requests_info, the
// latest state: its highest sample). Lines it cannot read are skipped.
func ParseMetrics(r io.Reader) (vals map[string]float64, labels map[string]map[string]string) {
	vals = make(map[string]float64)
	labels = make(map[string]map[string]string)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		var lbl string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, lbl, rest = line[:i], line[i+1:j], line[j+1:]
		} else if i := strings.IndexAny(line, " \t"); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		if name == loraInfoMetric {
			if _, seen := labels[name]; seen && v < vals[name] {
				continue
			}
			vals[name] = v
			labels[name] = parseLabels(lbl)
			continue
		}
		vals[name] += v
		if lbl != "" {
			labels[name] = parseLabels(lbl)
		}
	}
	return vals, labels
}

func parseLabels(s string) map[string]string {
	out := make(map[string]string)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			break
		}
		key := strings.TrimSpace(strings.TrimLeft(s[:eq], ","))
		v, n := "", eq+2
		for n < len(s) && s[n] != '"' {
			if s[n] == '\\' && n+1 < len(s) {
				n++
			}
			v += string(s[n])
			n++
		}
		out[key] = v
		if n+1 >= len(s) {
			break
		}
		s = s[n+1:]
	}
	return out
}

// driftLocked is what the bridge publishes with its load report about the
// events it could not index; b.mu is held.
func (b *Bridge) driftLocked() bus.Drift {
	ms := b.mirror.Stats()
	return bus.Drift{
		// Removals by block, the unit of RemovedUnknownBlock, so that a
		// share of Events is a share.
		Events:              ms.Events - ms.RemoveEvents + ms.RemovedBlocks + ms.UnknownRemoved + ms.Skipped + ms.UnknownKind,
		OrphanParent:        ms.Orphans,
		RemovedUnknownBlock: ms.UnknownRemoved,
		BadEvent:            ms.BadEvents,
		SkippedGroup:        ms.Skipped,
		Rebuilds:            b.st.Rebuilds,
	}
}
