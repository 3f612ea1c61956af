package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-llm/switchyard/internal/openai"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// loraSlots models vLLM's LoRA adapter slots: at most max adapters sit in
// GPU memory at once (--max-loras). A request for an adapter that is not
// there waits for a slot whose adapter no request is using, swaps it out
// and pays swap (simulated time) before it is scheduled; one for a resident
// adapter pays nothing. It is safe for concurrent use.
type loraSlots struct {
	max     int
	swap    time.Duration // simulated
	speedup float64

	mu       sync.Mutex // guards the fields below
	resident []string   // least recently used first
	active   map[string]int
	waiting  map[string]int
	changed  time.Time     // wall time of the last change of the running or waiting set
	freed    chan struct{} // closed and replaced when a slot may have come free
}

func newLoRASlots(max int, swap time.Duration, speedup float64) *loraSlots {
	return &loraSlots{max: max, swap: swap, speedup: speedup, active: map[string]int{}, waiting: map[string]int{},
		changed: time.Now(), freed: make(chan struct{})}
}

// acquire takes a slot for adapter, waiting while every slot holds an
// adapter in use by another request, and then sleeps the swap time if the
// adapter had to be loaded. It returns the simulated load time paid; the
// caller must release the adapter when its request is done, unless acquire
// failed (ctx ended).
func (l *loraSlots) acquire(ctx context.Context, adapter string) (time.Duration, error) {
	l.mu.Lock()
	queued := false
	for {
		if i := slices.Index(l.resident, adapter); i >= 0 {
			l.resident = append(slices.Delete(l.resident, i, i+1), adapter) // most recent last
			l.take(adapter, queued)
			l.mu.Unlock()
			return 0, nil
		}
		if len(l.resident) < l.max {
			l.resident = append(l.resident, adapter)
			break
		}
		if i := slices.IndexFunc(l.resident, func(a string) bool { return l.active[a] == 0 }); i >= 0 {
			l.resident = append(slices.Delete(l.resident, i, i+1), adapter)
			break
		}
		if !queued {
			queued = true
			l.waiting[adapter]++
			l.changed = time.Now()
		}
		freed := l.freed
		l.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			l.mu.Lock()
			l.unwait(adapter)
			l.mu.Unlock()
			return 0, ctx.Err()
		}
		l.mu.Lock()
	}
	l.take(adapter, queued)
	l.mu.Unlock()
	t := time.NewTimer(time.Duration(float64(l.swap) / l.speedup))
	defer t.Stop()
	select {
	case <-t.C:
		return l.swap, nil
	case <-ctx.Done():
		l.release(adapter)
		return 0, ctx.Err()
	}
}

// take counts adapter in use; mu is held.
func (l *loraSlots) take(adapter string, queued bool) {
	if queued {
		l.unwait(adapter)
	}
	l.active[adapter]++
	l.changed = time.Now()
}

func (l *loraSlots) unwait(adapter string) {
	if l.waiting[adapter]--; l.waiting[adapter] <= 0 {
		delete(l.waiting, adapter)
	}
	l.changed = time.Now()
}

// release ends one request's use of adapter.
func (l *loraSlots) release(adapter string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active[adapter]--; l.active[adapter] <= 0 {
		delete(l.active, adapter)
		close(l.freed)
		l.freed = make(chan struct{})
	}
	l.changed = time.Now()
}

// state is what vLLM's lora_requests_info says: the adapters of running
// requests, those of requests waiting for a slot, and when that last
// changed.
func (l *loraSlots) state() (running, waiting []string, changed time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for a := range l.active {
		running = append(running, a)
	}
	for a := range l.waiting {
		waiting = append(waiting, a)
	}
	slices.Sort(running)
	slices.Sort(waiting)
	return running, waiting, l.changed
}

// residentNames lists the adapters in slots.
func (l *loraSlots) residentNames() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(slices.Values(l.resident))
}

// LoRAState reports the worker's adapter slots; nil without adapters.
func (w *Worker) LoRAState() *bus.LoRAState {
	if len(w.adapterList()) == 0 {
		return nil
	}
	running, waiting, _ := w.loras.state()
	return &bus.LoRAState{Max: w.loras.max, Running: running, Waiting: waiting, Resident: w.loras.residentNames()}
}

// loraInfoCollector exports vllm:lora_requests_info as vLLM does: a gauge
// whose labels are the state (comma-separated adapter names) and whose
// value is the Unix time that state began.
type loraInfoCollector struct {
	w    *Worker
	desc *prometheus.Desc
}

func loraInfoDesc(labels prometheus.Labels) *prometheus.Desc {
	return prometheus.NewDesc("vllm:lora_requests_info", "Running stats on lora requests.",
		[]string{"max_lora", "running_lora_adapters", "waiting_lora_adapters"}, labels)
}

func (c *loraInfoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *loraInfoCollector) Collect(ch chan<- prometheus.Metric) {
	if len(c.w.adapterList()) == 0 {
		return
	}
	l := c.w.loras
	running, waiting, changed := l.state()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(changed.UnixNano())/1e9,
		strconv.Itoa(l.max), strings.Join(running, ","), strings.Join(waiting, ","))
}

// serveLoadLoRA is vLLM's POST /v1/load_lora_adapter {"lora_name",
// "lora_path"}: the adapter is served from now on (loaded into a slot by
// its first request).
func (w *Worker) serveLoadLoRA(rw http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
		Path string `json:"lora_path"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.Name == "" || req.Path == "" {
		openai.WriteError(rw, http.StatusBadRequest, openai.TypeInvalidRequest, "lora_name", "load_lora_adapter wants {\"lora_name\": name, \"lora_path\": path}")
		return
	}
	w.adMu.Lock()
	if _, ok := w.resolveModelLocked(req.Name); ok {
		w.adMu.Unlock()
		openai.WriteError(rw, http.StatusBadRequest, openai.TypeInvalidRequest, "lora_name", fmt.Sprintf("The lora adapter '%s' has already been loaded, or names the model.", req.Name))
		return
	}
	w.adapters = append(w.adapters, bus.Adapter{Name: req.Name, Root: req.Path})
	now := slices.Clone(w.adapters)
	w.adMu.Unlock()
	w.adaptersChanged(now)
	fmt.Fprintf(rw, "Success: LoRA adapter '%s' added successfully.", req.Name)
}

// serveUnloadLoRA is vLLM's POST /v1/unload_lora_adapter {"lora_name"}.
func (w *Worker) serveUnloadLoRA(rw http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil || req.Name == "" {
		openai.WriteError(rw, http.StatusBadRequest, openai.TypeInvalidRequest, "lora_name", "unload_lora_adapter wants {\"lora_name\": name}")
		return
	}
	w.adMu.Lock()
	n := len(w.adapters)
	w.adapters = slices.DeleteFunc(w.adapters, func(a bus.Adapter) bool { return a.Name == req.Name })
	removed, now := len(w.adapters) < n, slices.Clone(w.adapters)
	w.adMu.Unlock()
	if !removed {
		openai.WriteError(rw, http.StatusNotFound, openai.TypeNotFound, "lora_name", fmt.Sprintf("The lora adapter '%s' cannot be found.", req.Name))
		return
	}
	w.adaptersChanged(now)
	fmt.Fprintf(rw, "Success: LoRA adapter '%s' removed successfully.", req.Name)
}

func (w *Worker) adaptersChanged(now []bus.Adapter) {
	if f := w.cfg.AdaptersChanged; f != nil {
		f(now)
	}
}
