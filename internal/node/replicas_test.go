package node

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/router"
)

// expectRecorder records the workers whose events were expected.
type expectRecorder struct {
	mu      sync.Mutex
	workers []string
}

func (r *expectRecorder) ExpectEvents(worker string, _ time.Time) {
	r.mu.Lock()
	r.workers = append(r.workers, worker)
	r.mu.Unlock()
}

// TestExpectationArmsOnStoredBlocks: the KV-event expectation follows the
// blocks a request stores on its worker, not the blocks it computes there,
// so the decode worker of a remote prefill (Started with 0 prefill blocks,
// storing the transferred ones) is watched like a local prefill's worker.
func TestExpectationArmsOnStoredBlocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(x sharedInFlight)
		want []string
	}{
		{"local prefill", func(x sharedInFlight) {
			x.Started("a", "r1", 2, 3)
			x.Stores("a", "r1", 2)
			x.FirstToken("a", "r1")
		}, []string{"a"}},
		{"decode of a remote prefill", func(x sharedInFlight) {
			x.Started("p", "r1", 2, 3) // the remote prefill: no first token there
			x.Finished("p", "r1")
			x.Started("d", "r1", 0, 3)
			x.Stores("d", "r1", 2)
			x.FirstToken("d", "r1")
		}, []string{"d"}},
		{"fully cached", func(x sharedInFlight) {
			x.Started("a", "r1", 0, 3)
			x.Stores("a", "r1", 0)
			x.FirstToken("a", "r1")
		}, nil},
		{"finished before its first token", func(x sharedInFlight) {
			x.Started("a", "r1", 2, 3)
			x.Stores("a", "r1", 2)
			x.Finished("a", "r1")
			x.FirstToken("a", "r1")
		}, nil},
		{"released", func(x sharedInFlight) {
			x.Stores("a", "r1", 2)
			x.Release("a", "r1")
			x.FirstToken("a", "r1")
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := router.New(router.Config{})
			if err != nil {
				t.Fatal(err)
			}
			rec := &expectRecorder{}
			tc.run(sharedInFlight{r: r, ex: &expectations{c: rec, at: map[[2]string]time.Time{}}})
			if !slices.Equal(rec.workers, tc.want) {
				t.Errorf("events expected from %q, want %q", rec.workers, tc.want)
			}
		})
	}
}
