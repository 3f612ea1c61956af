package node

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestRuntimeMetrics: the frontend's /metrics carries the Go runtime and
// process collectors, so goroutine and memory growth can be watched.
func TestRuntimeMetrics(t *testing.T) {
	c := startCluster(t, FrontendConfig{}, 0)
	resp, err := http.Get(c.fe.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, name := range []string{"go_goroutines ", "process_resident_memory_bytes ", "go_memstats_heap_inuse_bytes ", "go_gc_duration_seconds"} {
		if !strings.Contains(string(b), "\n"+name) {
			t.Errorf("/metrics has no %s", strings.TrimSpace(name))
		}
	}
}
