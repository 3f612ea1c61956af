package admit

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestFairQueueShares: tenants that keep the queue backlogged dequeue
// tokens in proportion to their weights, whatever their arrival rates and
// request sizes, within 5% of each share.
func TestFairQueueShares(t *testing.T) {
	tests := []struct {
		name    string
		weights map[string]float64
		arrive  map[string]float64 // relative arrival rates
	}{
		{"equal weights, one tenant sends 5x", map[string]float64{"alpha": 1, "beta": 1}, map[string]float64{"alpha": 5, "beta": 1}},
		{"weights 1:2:3", map[string]float64{"a": 1, "b": 2, "c": 3}, map[string]float64{"a": 3, "b": 1, "c": 2}},
		{"weight 4 sends least", map[string]float64{"big": 4, "small": 1}, map[string]float64{"big": 1, "small": 6}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			q := newFairQueue(512, func(n string) float64 { return tc.weights[n] })
			var names []string
			var total float64
			for n, r := range tc.arrive {
				names = append(names, n)
				total += r
			}
			served := map[string]float64{}
			queued := map[string]int{}
			pops := 0
			for pops < 40000 {
				// Arrivals outpace service eight to one so that every tenant
				// stays backlogged (the bound below keeps the queue
				// finite); who arrives is random, by rate.
				for range 8 {
					x := rng.Float64() * total
					var who string
					for _, n := range sortedKeys(tc.arrive) {
						if x -= tc.arrive[n]; x < 0 {
							who = n
							break
						}
					}
					if who == "" {
						who = names[0]
					}
					if queued[who] > 200 {
						continue // bounded, like --max-queue
					}
					q.push(&waiter{tenant: who, prio: Standard, cost: float64(20 + rng.IntN(4000))})
					queued[who]++
				}
				w := q.pop(nil)
				if w == nil {
					continue
				}
				queued[w.tenant]--
				pops++
				if pops > 2000 { // past the ramp-up, when some tenant may not yet be backlogged
					served[w.tenant] += w.cost
				}
			}
			var sum, wsum float64
			for n := range tc.weights {
				sum += served[n]
				wsum += tc.weights[n]
			}
			for n, w := range tc.weights {
				got, want := served[n]/sum, w/wsum
				if math.Abs(got-want) > 0.05*want {
					t.Errorf("tenant %s: share %.4f of served tokens, want %.4f ±5%%", n, got, want)
				}
			}
		})
	}
}

func sortedKeys(m map[string]float64) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

// TestFairQueuePriority: a higher priority always leaves first; FIFO
// within one tenant.
func TestFairQueuePriority(t *testing.T) {
	q := newFairQueue(100, func(string) float64 { return 1 })
	s1 := &waiter{tenant: "a", prio: Sheddable, cost: 1}
	st1 := &waiter{tenant: "a", prio: Standard, cost: 1}
	st2 := &waiter{tenant: "a", prio: Standard, cost: 1}
	c1 := &waiter{tenant: "b", prio: Critical, cost: 1}
	for _, w := range []*waiter{s1, st1, st2, c1} {
		q.push(w)
	}
	for i, want := range []*waiter{c1, st1, st2, s1} {
		if got := q.pop(nil); got != want {
			t.Errorf("pop %d: got %s/%s, want %s/%s", i, got.tenant, got.prio, want.tenant, want.prio)
		}
	}
	if q.pop(nil) != nil || q.len() != 0 {
		t.Errorf("queue not empty after four pops")
	}
}

// TestFairQueueEligible: a tenant at its concurrency limit is skipped,
// not stalling the others; a huge request is served without looping a
// round per quantum.
func TestFairQueueEligible(t *testing.T) {
	q := newFairQueue(1, func(string) float64 { return 1 })
	big := &waiter{tenant: "a", prio: Standard, cost: 1e9}
	b := &waiter{tenant: "b", prio: Standard, cost: 5}
	q.push(big)
	q.push(b)
	if got := q.pop(func(n string) bool { return n != "b" }); got != big {
		t.Fatalf("with b ineligible: got %v, want a's big request", got)
	}
	if got := q.pop(func(n string) bool { return n != "b" }); got != nil {
		t.Fatalf("only b left, ineligible: got %v, want nil", got)
	}
	if got := q.pop(nil); got != b {
		t.Fatalf("b eligible again: got %v", got)
	}
}

// TestFairQueueEvict: a full queue gives up its newest lowest-priority
// request, from the longest flow, and never one of the newcomer's rank.
func TestFairQueueEvict(t *testing.T) {
	q := newFairQueue(100, func(string) float64 { return 1 })
	a1 := &waiter{tenant: "a", prio: Standard, cost: 1}
	a2 := &waiter{tenant: "a", prio: Standard, cost: 1}
	b1 := &waiter{tenant: "b", prio: Standard, cost: 1}
	for _, w := range []*waiter{a1, a2, b1} {
		q.push(w)
	}
	if got := q.evict(Standard); got != nil {
		t.Errorf("evict below standard: got %v, want nil", got)
	}
	if got := q.evict(Critical); got != a2 {
		t.Errorf("evict below critical: got %v, want a's newest", got)
	}
	if q.len() != 2 {
		t.Errorf("len %d after evict, want 2", q.len())
	}
}
