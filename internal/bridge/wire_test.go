package bridge

import (
	"os"
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

// golden decodes one of enginewire's golden payloads.
func golden(t *testing.T, name string) *enginewire.Batch {
	t.Helper()
	data, err := os.ReadFile("../enginewire/testdata/" + name + ".msgpack")
	if err != nil {
		t.Fatal(err)
	}
	var b enginewire.Batch
	if err := enginewire.DecodeBatch(data, &b); err != nil {
		t.Fatal(err)
	}
	return &b
}

func seq(from, n uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = from + uint32(i)
	}
	return t
}

// The third-party engine's frame (parent 0 for roots, three blocks in one
// event, token ids above 2^31, an adapter's blocks) gives the frontend's
// own chains, and nothing is dropped.
func TestMirrorThirdPartyEngineFrame(t *testing.T) {
	m := NewMirror(16)
	out := apply(t, m, golden(t, "third_party_engine").Events...)
	root := kvindex.HashChain(nil, "", seq(1<<31, 48), 16)
	child := kvindex.HashBlock(root[2], seq(0, 16))
	adapter := kvindex.HashChain(nil, kvindex.LoRASalt("sql-adapter", ""), seq(100, 32), 16)
	want := []kvevents.Event{
		{Kind: kvevents.Stored, Parent: kvindex.Root(""), Hashes: root},
		{Kind: kvevents.Stored, Parent: root[2], Hashes: []uint64{child}},
		{Kind: kvevents.Stored, Parent: kvindex.Root(kvindex.LoRASalt("sql-adapter", "")), Hashes: adapter},
		{Kind: kvevents.Removed, Hashes: []uint64{child}},
	}
	if len(out) != len(want) {
		t.Fatalf("got %d events, want %d: %+v", len(out), len(want), out)
	}
	for i := range want {
		if out[i].Kind != want[i].Kind || out[i].Parent != want[i].Parent || !slices.Equal(out[i].Hashes, want[i].Hashes) {
			t.Errorf("event %d = %+v, want %+v", i, out[i], want[i])
		}
	}
	if st := m.Stats(); st.Orphans != 0 || st.UnknownRemoved != 0 || st.BadEvents != 0 || st.StoredBlocks != 6 {
		t.Errorf("stats = %+v, want 6 blocks stored and nothing dropped", st)
	}
}

// Optional fields left out (no parent key, no medium) are defaults; an
// adapter named by lora_id alone gets a root of its own, never the base
// model's.
func TestMirrorMinimalMapFrame(t *testing.T) {
	m := NewMirror(16)
	out := apply(t, m, golden(t, "third_party_map_minimal").Events...)
	base := kvindex.HashChain(nil, "", seq(0, 16), 16)
	byID := kvindex.HashChain(nil, kvindex.LoRASalt("#7", ""), seq(16, 16), 16)
	if len(out) != 3 || !slices.Equal(out[0].Hashes, base) || !slices.Equal(out[1].Hashes, byID) ||
		out[2].Kind != kvevents.Removed || !slices.Equal(out[2].Hashes, base) {
		t.Errorf("events = %+v, want base %x, adapter #7 %x, removal of the base block", out, base, byID)
	}
	if byID[0] == kvindex.HashChain(nil, "", seq(16, 16), 16)[0] {
		t.Error("lora_id block hashed like a base-model block")
	}
}

// A chain whose parent the bridge never saw is not dropped: it is kept
// under a root of its own, counted, its children link to it and its
// removals are recognised.
func TestMirrorOrphanChainKept(t *testing.T) {
	m := NewMirror(16)
	lost := uint64(0xdead)
	toks := tokens(5, 48)
	out := apply(t, m, stored([]uint64{1, 2}, &lost, toks[:32]))
	if len(out) != 1 || len(out[0].Hashes) != 2 {
		t.Fatalf("orphan chain = %+v, want its 2 blocks stored", out)
	}
	orphan := out[0].Hashes
	if frontend := kvindex.HashChain(nil, "", toks[:32], 16); slices.Contains(frontend, orphan[0]) || slices.Contains(frontend, orphan[1]) {
		t.Error("orphan blocks hash like a prompt's: a request could match blocks whose prefix is unknown")
	}
	two := uint64(2)
	out = apply(t, m, stored([]uint64{3}, &two, toks[32:]))
	if len(out) != 1 || out[0].Parent != orphan[1] || out[0].Hashes[0] != kvindex.HashBlock(orphan[1], toks[32:]) {
		t.Errorf("child of the orphan chain = %+v", out)
	}
	// The same orphan again (a replayed batch) gives the same hashes.
	again := NewMirror(16)
	if out := apply(t, again, stored([]uint64{1, 2}, &lost, toks[:32])); !slices.Equal(out[0].Hashes, orphan) {
		t.Errorf("orphan hashes differ between mirrors: %x vs %x", out[0].Hashes, orphan)
	}
	apply(t, m, enginewire.Event{Kind: enginewire.BlockRemoved, BlockHashes: []uint64{1, 2, 3}})
	if st := m.Stats(); st.Orphans != 1 || st.UnknownRemoved != 0 || st.RemovedBlocks != 3 || m.Len() != 0 {
		t.Errorf("stats = %+v, mirror %d blocks; want one orphan, every removal known", st, m.Len())
	}
}

// Parent 0 means "no parent" only while no block has engine hash 0.
func TestMirrorParentZero(t *testing.T) {
	m := NewMirror(16)
	zero := uint64(0)
	toks := tokens(6, 32)
	out := apply(t, m, stored([]uint64{0}, &zero, toks[:16])) // a block whose own engine hash is 0
	if want := kvindex.HashChain(nil, "", toks[:16], 16); len(out) != 1 || !slices.Equal(out[0].Hashes, want) {
		t.Fatalf("root with parent 0 = %+v, want %x", out, want)
	}
	out = apply(t, m, stored([]uint64{7}, &zero, toks[16:]))
	if want := kvindex.HashChain(nil, "", toks, 16)[1]; len(out) != 1 || out[0].Hashes[0] != want {
		t.Errorf("child of engine block 0 = %+v, want %x", out, want)
	}
}
