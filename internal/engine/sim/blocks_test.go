package sim

import (
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/kvevents"
)

func TestBlockManagerEvictsLeastRecentlyReleased(t *testing.T) {
	m := newBlockManager(3)
	var ids []int32
	for h := uint64(1); h <= 3; h++ {
		i, ok := m.allocate()
		if !ok {
			t.Fatalf("allocate %d failed", h)
		}
		m.commit(i, h-1, h*100, nil, "")
		ids = append(ids, i)
	}
	if _, ok := m.allocate(); ok {
		t.Fatal("allocated a 4th block while all 3 are referenced")
	}
	// Release in the order 2, 0, 1: hash 300, then 100, then 200.
	m.release(ids[2])
	m.release(ids[0])
	m.release(ids[1])
	if got, want := m.available(), 3; got != want {
		t.Fatalf("available = %d, want %d", got, want)
	}
	// Re-referencing 100 protects it from eviction.
	m.acquireCached(100)
	m.takeEvents()
	var evicted []uint64
	for range 2 {
		if _, ok := m.allocate(); !ok {
			t.Fatal("allocate failed with evictable blocks left")
		}
		for _, e := range m.takeEvents() {
			evicted = append(evicted, e.Hashes...)
		}
	}
	if want := []uint64{300, 200}; !slices.Equal(evicted, want) {
		t.Errorf("evicted %v, want %v", evicted, want)
	}
	if got := m.prefixLen([]uint64{100, 200}); got != 1 {
		t.Errorf("prefixLen after eviction = %d, want 1", got)
	}
	if _, ok := m.allocate(); ok {
		t.Error("evicted a referenced block")
	}
}

func TestBlockManagerStoredEventsCoalesceAndClear(t *testing.T) {
	m := newBlockManager(4)
	for h := uint64(1); h <= 3; h++ {
		i, _ := m.allocate()
		m.commit(i, h-1, h, nil, "")
		if h != 2 {
			m.release(i)
		}
	}
	ev := m.takeEvents()
	if len(ev) != 1 || ev[0].Kind != kvevents.Stored || ev[0].Parent != 0 || !slices.Equal(ev[0].Hashes, []uint64{1, 2, 3}) {
		t.Fatalf("events = %+v, want one Stored 0→[1 2 3]", ev)
	}
	// A duplicate commit neither caches nor emits.
	i, _ := m.allocate()
	m.commit(i, 0, 1, nil, "")
	if len(m.takeEvents()) != 0 || m.blocks[i].cached {
		t.Error("duplicate commit cached the block or emitted an event")
	}
	m.release(i)
	// Block 2 is still referenced: clearing removes 1 and 3 only.
	if n := m.clearUnreferenced(); n != 2 {
		t.Errorf("cleared %d blocks, want 2", n)
	}
	ev = m.takeEvents()
	if len(ev) != 1 || ev[0].Kind != kvevents.Removed || len(ev[0].Hashes) != 2 {
		t.Fatalf("events = %+v, want one Removed of 2 hashes", ev)
	}
	b, _ := m.byHash.get(2, m.blocks)
	m.release(b)
	m.clearUnreferenced()
	if ev = m.takeEvents(); len(ev) != 1 || ev[0].Kind != kvevents.Cleared {
		t.Fatalf("events = %+v, want Cleared", ev)
	}
	if m.used != 0 || m.available() != 4 {
		t.Errorf("used %d available %d, want 0 and 4", m.used, m.available())
	}
}
