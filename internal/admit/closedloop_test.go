package admit

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestClosedLoopShares: the mix in virtual time: 8 slots, tenant
// alpha with 24 standard and 4 critical closed-loop clients, beta with 6
// standard. Equal weights: beta's 6 clients are enough to claim half of
// the standard slots, so their served counts must be near equal.
func TestClosedLoopShares(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := parseTenants(t, "tenants:\n  - {name: alpha, key: ka, max_priority: critical}\n  - {name: beta, key: kb}\n")
		c := newController(t, 8, Config{Tenants: ts})
		alpha, beta := ts.ByKey("ka"), ts.ByKey("kb")
		var mu sync.Mutex
		served := map[string]int{}
		end := time.Now().Add(60 * time.Second)
		var wg sync.WaitGroup
		client := func(tn *Tenant, p Priority, seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			// Requests still queued at the end are abandoned: counting them
			// would credit the tenant with the longest queue.
			ctx, cancel := context.WithDeadline(context.Background(), end)
			defer cancel()
			for time.Now().Before(end) {
				tk, err := c.Acquire(ctx, Request{Tenant: tn, Priority: p, Cost: 250 + rng.IntN(60)})
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(600+rng.IntN(300)) * time.Millisecond)
				tk.Release()
				mu.Lock()
				served[tn.Name+"/"+p.String()]++
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // the client's turnaround
			}
		}
		for i := range 24 {
			wg.Add(1)
			go client(alpha, Standard, uint64(i))
		}
		for i := range 4 {
			wg.Add(1)
			go client(alpha, Critical, uint64(100+i))
		}
		for i := range 6 {
			wg.Add(1)
			go client(beta, Standard, uint64(200+i))
		}
		wg.Wait()
		a, b := served["alpha/standard"], served["beta/standard"]
		t.Logf("served %v; beta:alpha standard %.3f", served, float64(b)/float64(a))
		if float64(b) < 0.9*float64(a) {
			t.Errorf("beta served %d standard requests, alpha %d: want beta at least 0.9x alpha with equal weights", b, a)
		}
	})
}
