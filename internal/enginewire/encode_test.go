package enginewire

import (
	"reflect"
	"testing"
)

func sampleBatch() *Batch {
	toks := make([]uint32, 32)
	for i := range toks {
		toks[i] = uint32(100000 + i)
	}
	return &Batch{TS: 12.5, HasDPRank: true, DPRank: 1, Events: []Event{
		{Kind: BlockStored, BlockHashes: []uint64{1 << 63, 42}, TokenIDs: toks, BlockSize: 16, Medium: MediumGPU,
			RawExtraKeys: AppendExtraKeys(nil, "tenant", 2)},
		{Kind: BlockStored, BlockHashes: []uint64{43}, Parent: 42, HasParent: true, TokenIDs: toks[:16], BlockSize: 16, Medium: MediumCPU, LoraName: "ad"},
		{Kind: BlockRemoved, BlockHashes: []uint64{43}, Medium: MediumCPU},
		{Kind: AllBlocksCleared},
	}}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, l := range []Layout{{}, {ArrayEvents: true}, {MapBatch: true}, {BinHashes: true}, {ArrayEvents: true, MapBatch: true, BinHashes: true}} {
		want := sampleBatch()
		data := AppendBatch(nil, want, l)
		var got Batch
		if err := DecodeBatch(data, &got); err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		if got.TS != want.TS || got.DPRank != want.DPRank || !got.HasDPRank || len(got.Events) != len(want.Events) {
			t.Fatalf("%+v: batch = %+v", l, got)
		}
		for i := range want.Events {
			g, w := got.Events[i], want.Events[i]
			if len(w.BlockHashes) == 0 {
				w.BlockHashes = g.BlockHashes
			}
			if len(w.TokenIDs) == 0 {
				w.TokenIDs = g.TokenIDs
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%+v: event %d = %+v, want %+v", l, i, g, w)
			}
		}
	}
}
