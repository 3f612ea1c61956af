package bridge

import (
	"errors"
	"slices"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

func tokens(seed uint32, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = seed*7919 + uint32(i)
	}
	return t
}

func stored(hashes []uint64, parent *uint64, toks []uint32) enginewire.Event {
	e := enginewire.Event{Kind: enginewire.BlockStored, BlockHashes: hashes, TokenIDs: toks, BlockSize: 16}
	if parent != nil {
		e.Parent, e.HasParent = *parent, true
	}
	return e
}

func apply(t *testing.T, m *Mirror, evs ...enginewire.Event) []kvevents.Event {
	t.Helper()
	out, err := m.Apply(&enginewire.Batch{Events: evs})
	if err != nil {
		t.Fatal(err)
	}
	// Deep copy: out is reused by the next Apply.
	cp := make([]kvevents.Event, len(out))
	for i, e := range out {
		cp[i] = kvevents.Event{Kind: e.Kind, Medium: e.Medium, Parent: e.Parent, Hashes: slices.Clone(e.Hashes)}
	}
	return cp
}

// The rewrite must give exactly the hashes the frontend computes for the
// same tokens, whatever the engine's own hashes are, across events.
func TestMirrorMatchesFrontendChain(t *testing.T) {
	toks := tokens(1, 64)
	want := kvindex.HashChain(nil, "", toks, 16)
	m := NewMirror(16)
	p := uint64(0xe2)
	got := apply(t, m, stored([]uint64{0xe1, 0xe2}, nil, toks[:32]))
	got = append(got, apply(t, m, stored([]uint64{0xe3, 0xe4}, &p, toks[32:]))...)
	var all []uint64
	for _, e := range got {
		if e.Kind != kvevents.Stored {
			t.Fatalf("event %v", e.Kind)
		}
		all = append(all, e.Hashes...)
	}
	if !slices.Equal(all, want) {
		t.Errorf("rewritten chain = %x, want frontend's %x", all, want)
	}
	if got[0].Parent != kvindex.Root("") || got[1].Parent != want[1] {
		t.Errorf("parents = %x %x", got[0].Parent, got[1].Parent)
	}

	// A cache_salt on the first block seeds the chain as the frontend does.
	m2 := NewMirror(16)
	e := stored([]uint64{9, 10}, nil, toks[:32])
	e.RawExtraKeys = enginewire.AppendExtraKeys(nil, "tenant-a", 2)
	got = apply(t, m2, e)
	if want := kvindex.HashChain(nil, "tenant-a", toks[:32], 16); !slices.Equal(got[0].Hashes, want) {
		t.Errorf("salted chain = %x, want %x", got[0].Hashes, want)
	}
	// A LoRA adapter's blocks never share hashes with the base model's.
	e = stored([]uint64{11}, nil, toks[:16])
	e.LoraName = "adapter"
	got = apply(t, m2, e)
	if got[0].Hashes[0] == want[0] || got[0].Hashes[0] == kvindex.HashChain(nil, "", toks[:16], 16)[0] {
		t.Error("LoRA block hashed like a base-model block")
	}
}

func TestMirrorRemovalsAndMedia(t *testing.T) {
	toks := tokens(2, 32)
	sy := kvindex.HashChain(nil, "", toks, 16)
	m := NewMirror(16)
	apply(t, m, stored([]uint64{1, 2}, nil, toks))
	// The same block offloaded to CPU: still one index entry.
	cpu := stored([]uint64{1, 2}, nil, toks)
	cpu.Medium = enginewire.MediumCPU
	if out := apply(t, m, cpu); len(out) != 1 || !slices.Equal(out[0].Hashes, sy) {
		t.Errorf("CPU store = %+v", out)
	}
	if got := m.MediaOf(1); !got.Has(kvevents.TierGPU) || !got.Has(kvevents.TierCPU) || got.Fastest() != kvevents.TierGPU {
		t.Errorf("media = %b", got)
	}
	// Evicted from GPU, still on CPU: the index drops the GPU tier only.
	gpuRm := enginewire.Event{Kind: enginewire.BlockRemoved, BlockHashes: []uint64{2}}
	if out := apply(t, m, gpuRm); len(out) != 1 || out[0].Medium != kvevents.TierGPU || !slices.Equal(out[0].Hashes, sy[1:]) {
		t.Errorf("GPU removal of a CPU-held block = %+v", out)
	}
	if got := m.MediaOf(2).Fastest(); got != kvevents.TierCPU {
		t.Errorf("tier after GPU eviction = %v, want CPU", got)
	}
	cpuRm := enginewire.Event{Kind: enginewire.BlockRemoved, BlockHashes: []uint64{2, 77}, Medium: enginewire.MediumCPU}
	out := apply(t, m, cpuRm)
	if len(out) != 1 || out[0].Kind != kvevents.Removed || out[0].Medium != kvevents.TierCPU || !slices.Equal(out[0].Hashes, sy[1:]) {
		t.Errorf("last removal = %+v, want Removed %x", out, sy[1:])
	}
	if st := m.Stats(); st.UnknownRemoved != 1 || st.RemovedBlocks != 2 {
		t.Errorf("stats = %+v, want 1 unknown removal, 2 removed", st)
	}
	if m.Len() != 1 || m.MediaOf(2) != 0 {
		t.Errorf("mirror holds %d blocks, media of the removed one %b", m.Len(), m.MediaOf(2))
	}
	// An unknown medium is indexed, counted, and never GPU.
	odd := stored([]uint64{5}, nil, tokens(3, 16))
	odd.Medium, odd.MediumName = enginewire.MediumUnknown, "NVME_OF"
	apply(t, m, odd)
	if m.Stats().UnknownMedium != 1 || m.MediaOf(5).Fastest() != kvevents.TierDisk {
		t.Errorf("unknown medium: stats %+v, fastest %v", m.Stats(), m.MediaOf(5).Fastest())
	}
	out = apply(t, m, enginewire.Event{Kind: enginewire.AllBlocksCleared})
	if len(out) != 1 || out[0].Kind != kvevents.Cleared || m.Len() != 0 {
		t.Errorf("clear = %+v, mirror %d", out, m.Len())
	}
}

func TestMirrorRefusesWhatItCannotIndex(t *testing.T) {
	m := NewMirror(16)
	unknownParent := uint64(99)
	apply(t, m, stored([]uint64{1}, &unknownParent, tokens(1, 16)))
	short := stored([]uint64{2, 3}, nil, tokens(1, 20)) // SGLang: last page partial
	out := apply(t, m, short)
	if len(out) != 1 || len(out[0].Hashes) != 1 {
		t.Errorf("partial page: %+v, want the full block only", out)
	}
	// The partial page is known, so its removal is not "unknown".
	apply(t, m, enginewire.Event{Kind: enginewire.BlockRemoved, BlockHashes: []uint64{3}})
	bad := stored([]uint64{4}, nil, tokens(1, 40)) // more tokens than blocks
	apply(t, m, bad)
	skipped := stored([]uint64{6}, nil, tokens(1, 16))
	skipped.Skip = enginewire.SkipGroup
	apply(t, m, skipped, enginewire.Event{Kind: 0})
	st := m.Stats()
	if st.Orphans != 1 || st.Partial != 1 || st.UnknownRemoved != 0 || st.BadEvents != 1 || st.Skipped != 1 || st.UnknownKind != 1 {
		t.Errorf("stats = %+v", st)
	}
	wrong := stored([]uint64{7}, nil, tokens(1, 32))
	wrong.BlockSize = 32
	if _, err := m.Apply(&enginewire.Batch{Events: []enginewire.Event{wrong}}); !errors.Is(err, ErrBlockSize) {
		t.Errorf("block size 32 on a 16 bridge: err = %v", err)
	}
}

// vLLM's offloading stores a GPU block to CPU under the same engine hash;
// the bridge takes its Switchyard hash from the mirror, not the tokens.
func TestMirrorOffloadKeepsHashes(t *testing.T) {
	toks := tokens(4, 32)
	sy := kvindex.HashChain(nil, "", toks, 16)
	m := NewMirror(16)
	apply(t, m, stored([]uint64{1, 2}, nil, toks))
	off := stored([]uint64{2}, nil, make([]uint32, 16)) // tokens not sent again
	off.Medium = enginewire.MediumCPU
	out := apply(t, m, off)
	if len(out) != 1 || out[0].Medium != kvevents.TierCPU || !slices.Equal(out[0].Hashes, sy[1:]) {
		t.Errorf("offload = %+v, want CPU Stored %x", out, sy[1:])
	}
	if st := m.Stats(); st.BadEvents != 0 || st.Orphans != 0 {
		t.Errorf("stats = %+v", st)
	}
}
