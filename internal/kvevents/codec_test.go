package kvevents

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/msgpack"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var goldenBatches = []struct {
	name  string
	batch Batch
}{
	{"heartbeat", Batch{WorkerID: "w1", Epoch: 1700000000000000000, Seq: 7, UnixNano: 1700000000123456789, Heartbeat: true}},
	{"stored", Batch{WorkerID: "worker-a", Epoch: 3, Seq: 1, UnixNano: 5, Events: []Event{
		{Kind: Stored, Parent: 0xcbf29ce484222325, Hashes: []uint64{0x8a, 0x1234, 0xdeadbeef, 0xfedcba9876543210}},
	}}},
	{"mixed", Batch{WorkerID: "w_2", Epoch: 1 << 40, Seq: 300, UnixNano: -1, Events: []Event{
		{Kind: Removed, Hashes: []uint64{1, 2, 3}},
		{Kind: Cleared},
		{Kind: Stored, Parent: 9, Hashes: []uint64{math.MaxUint64}},
	}}},
	// A GPU eviction that offloads, as vLLM reports it: GPU Removed, then
	// CPU Stored; then the block loaded back (GPU Stored, the CPU copy
	// stays) and a host-memory eviction to disk.
	{"offload", Batch{WorkerID: "w3", Epoch: 4, Seq: 2, UnixNano: 6, Events: []Event{
		{Kind: Removed, Medium: TierGPU, Hashes: []uint64{0x11, 0x12}},
		{Kind: Stored, Medium: TierCPU, Parent: 0x10, Hashes: []uint64{0x11, 0x12}},
		{Kind: Stored, Medium: TierGPU, Parent: 0x10, Hashes: []uint64{0x11}},
		{Kind: Removed, Medium: TierCPU, Hashes: []uint64{0x12}},
		{Kind: Stored, Medium: TierDisk, Parent: 0x11, Hashes: []uint64{0x12}},
	}}},
}

// golden compares data with testdata/name.golden (hex, 32 bytes a line),
// or rewrites the file under -update.
func golden(t *testing.T, name string, data []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	var sb strings.Builder
	for i := 0; i < len(data); i += 32 {
		sb.WriteString(hex.EncodeToString(data[i:min(i+32, len(data))]))
		sb.WriteByte('\n')
	}
	if *update {
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got := sb.String(); got != string(want) {
		t.Errorf("%s: encoding changed:\ngot\n%swant\n%s", path, got, want)
	}
}

func readGolden(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".golden"))
	if err != nil {
		t.Fatal(err)
	}
	data, err := hex.DecodeString(strings.ReplaceAll(string(raw), "\n", ""))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestBatchGolden(t *testing.T) {
	for _, tt := range goldenBatches {
		t.Run(tt.name, func(t *testing.T) {
			golden(t, "batch_"+tt.name, AppendBatch(nil, &tt.batch))
			var got Batch
			if err := DecodeBatch(readGolden(t, "batch_"+tt.name), &got); err != nil {
				t.Fatal(err)
			}
			if !batchEqual(&got, &tt.batch) {
				t.Errorf("decoded %+v, want %+v", got, tt.batch)
			}
		})
	}
}

func TestSnapshotGolden(t *testing.T) {
	tests := []struct {
		name string
		snap Snapshot
	}{
		{"snapshot", Snapshot{WorkerID: "w1", Epoch: 11, Seq: 99, Hashes: []uint64{5, 1 << 33, math.MaxUint64}}},
		{"snapshot_error", Snapshot{WorkerID: "w1", Epoch: 11, Err: "too big"}},
		{"snapshot_tiers", Snapshot{WorkerID: "w1", Epoch: 11, Seq: 5, Hashes: []uint64{5},
			Lower: []TierHashes{{Medium: TierCPU, Hashes: []uint64{5, 6}}, {Medium: TierDisk, Hashes: []uint64{7}}}}},
	}
	for _, tt := range tests {
		golden(t, tt.name, AppendSnapshot(nil, &tt.snap))
		var got Snapshot
		if err := DecodeSnapshot(readGolden(t, tt.name), &got); err != nil {
			t.Fatal(err)
		}
		if got.WorkerID != tt.snap.WorkerID || got.Epoch != tt.snap.Epoch || got.Seq != tt.snap.Seq ||
			!slices.Equal(got.Hashes, tt.snap.Hashes) || got.Err != tt.snap.Err || fmt.Sprint(got.Lower) != fmt.Sprint(tt.snap.Lower) {
			t.Errorf("%s: decoded %+v, want %+v", tt.name, got, tt.snap)
		}
	}
}

// TestDecodeWithoutMedium: the first encoding had no medium; its events are
// GPU events.
func TestDecodeWithoutMedium(t *testing.T) {
	var got Batch
	if err := DecodeBatch(readGolden(t, "batch_mixed_nomedium"), &got); err != nil {
		t.Fatal(err)
	}
	if want := &goldenBatches[2].batch; !batchEqual(&got, want) || got.UnknownMedia != 0 {
		t.Errorf("decoded %+v, want %+v", got, *want)
	}
}

// TestUnknownMedium: a medium Switchyard does not know is counted and read
// as the slowest tier, never as the GPU, and the batch is not rejected.
func TestUnknownMedium(t *testing.T) {
	tests := []struct {
		name, medium string
		want         Tier
		unknown      int
	}{
		{"gpu", "GPU", TierGPU, 0},
		{"lower case", "cpu", TierCPU, 0},
		{"disk", "DISK", TierDisk, 0},
		{"empty is gpu", "", TierGPU, 0},
		{"unknown", "NVME_OF", TierDisk, 1},
		{"lookalike", "GPU2", TierDisk, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Batch{WorkerID: "w", Epoch: 1, Seq: 1, Events: []Event{{Kind: Stored, Parent: 1, Hashes: []uint64{2}}}}
			data := AppendBatch(nil, &b)
			// Swap the encoded "GPU" (a3 'G' 'P' 'U', last) for the medium.
			data = msgpack.AppendStr(data[:len(data)-4], tt.medium)
			var got Batch
			if err := DecodeBatch(data, &got); err != nil {
				t.Fatal(err)
			}
			if got.Events[0].Medium != tt.want || got.UnknownMedia != tt.unknown {
				t.Errorf("medium %q: tier %v, unknown %d; want %v, %d", tt.medium, got.Events[0].Medium, got.UnknownMedia, tt.want, tt.unknown)
			}
			if tier, ok := ParseMedium(tt.medium); tier != tt.want || ok != (tt.unknown == 0) {
				t.Errorf("ParseMedium(%q) = %v, %v", tt.medium, tier, ok)
			}
		})
	}
}

// batchEqual compares batches, treating nil and empty slices alike.
func batchEqual(a, b *Batch) bool {
	if a.WorkerID != b.WorkerID || a.Epoch != b.Epoch || a.Seq != b.Seq || a.UnixNano != b.UnixNano ||
		a.Heartbeat != b.Heartbeat || len(a.Events) != len(b.Events) {
		return false
	}
	for i := range a.Events {
		x, y := a.Events[i], b.Events[i]
		if x.Kind != y.Kind || x.Medium != y.Medium || x.Parent != y.Parent || !slices.Equal(x.Hashes, y.Hashes) {
			return false
		}
	}
	return true
}

func TestDecodeIntegerWidths(t *testing.T) {
	// The encoder picks the shortest form; other encoders may not. A batch
	// written with every integer as uint64/int64 must decode the same.
	long := []byte{0x97, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1, 0xa1, 'w',
		0xcf, 0, 0, 0, 0, 0, 0, 0, 2, // epoch
		0xd3, 0, 0, 0, 0, 0, 0, 0, 3, // seq as signed
		0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, // unix nano -2
		0xc2, 0xdd, 0, 0, 0, 1, // events: array32 of 1
		0x93, 0xcc, 1, 0xcd, 0, 5, 0xdc, 0, 1, 0xce, 0, 0, 0, 6}
	var got Batch
	if err := DecodeBatch(long, &got); err != nil {
		t.Fatal(err)
	}
	want := Batch{WorkerID: "w", Epoch: 2, Seq: 3, UnixNano: -2, Events: []Event{{Kind: Stored, Parent: 5, Hashes: []uint64{6}}}}
	if !batchEqual(&got, &want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := AppendBatch(nil, &goldenBatches[1].batch)
	hb := AppendBatch(nil, &goldenBatches[0].batch)
	mutate := func(b []byte, i int, v byte) []byte { c := slices.Clone(b); c[i] = v; return c }
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"not an array", []byte{0xc0}, "want array"},
		{"wrong field count", mutate(good, 0, 0x96), "6 fields"},
		{"future version", mutate(good, 1, 2), "version 2"},
		{"truncated", good[:len(good)-3], "truncated"},
		{"trailing bytes", append(slices.Clone(good), 0), "trailing"},
		{"empty worker", AppendBatch(nil, &Batch{Seq: 1}), "empty worker"},
		{"bad kind", AppendBatch(nil, &Batch{WorkerID: "w", Events: []Event{{Kind: 9}}}), "kind 9"},
		{"cleared with hashes", AppendBatch(nil, &Batch{WorkerID: "w", Events: []Event{{Kind: Cleared, Hashes: []uint64{1}}}}), "cleared with 1"},
		{"heartbeat with events", AppendBatch(nil, &Batch{WorkerID: "w", Heartbeat: true, Events: []Event{{Kind: Cleared}}}), "heartbeat with 1"},
		{"huge array length", []byte{0x97, 1, 0xa1, 'w', 1, 1, 1, 0xc2, 0xdd, 0x7f, 0xff, 0xff, 0xff}, "elements in"},
		{"negative seq", mutate(hb, 14, 0xd0), "want unsigned"},
		{"bool is int", mutate(hb, len(hb)-2, 0x01), "want bool"},
	}
	for _, tt := range tests {
		var b Batch
		err := DecodeBatch(tt.data, &b)
		if err == nil || !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got error %v, want malformed mentioning %q", tt.name, err, tt.want)
		}
	}
}

func TestDecodeAllocs(t *testing.T) {
	data := AppendBatch(nil, &goldenBatches[2].batch)
	var b Batch
	if err := DecodeBatch(data, &b); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := DecodeBatch(data, &b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("DecodeBatch into a reused Batch: %v allocs, want 0", allocs)
	}
	buf := make([]byte, 0, 1024)
	allocs = testing.AllocsPerRun(100, func() { buf = AppendBatch(buf[:0], &goldenBatches[2].batch) })
	if allocs != 0 {
		t.Errorf("AppendBatch into a sized buffer: %v allocs, want 0", allocs)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, tt := range goldenBatches {
		f.Add(AppendBatch(nil, &tt.batch))
	}
	f.Add([]byte{0x97, 1, 0xa1, 'w', 1, 1, 1, 0xc2, 0xdd, 0x7f, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b Batch
		if DecodeBatch(data, &b) != nil {
			return
		}
		// Whatever decodes re-encodes to something that decodes the same.
		var again Batch
		if err := DecodeBatch(AppendBatch(nil, &b), &again); err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if !batchEqual(&again, &b) {
			t.Fatalf("round trip changed %+v into %+v", b, again)
		}
	})
}

func FuzzRoundTrip(f *testing.F) {
	f.Add("w1", uint64(1), uint64(2), int64(3), false, uint8(1), uint64(4), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add("worker-with-a-long-name-over-thirty-two-bytes", uint64(math.MaxUint64), uint64(0), int64(math.MinInt64), true, uint8(3), uint64(0), []byte{})
	f.Fuzz(func(t *testing.T, id string, epoch, seq uint64, nano int64, hb bool, kind uint8, parent uint64, raw []byte) {
		if id == "" {
			return
		}
		in := Batch{WorkerID: id, Epoch: epoch, Seq: seq, UnixNano: nano, Heartbeat: hb}
		if !hb {
			k := Kind(kind%3 + 1)
			var hs []uint64
			if k != Cleared {
				for i := 0; i+8 <= len(raw); i += 8 {
					v := uint64(0)
					for _, c := range raw[i : i+8] {
						v = v<<8 | uint64(c)
					}
					hs = append(hs, v)
				}
				for _, c := range raw[len(raw)/8*8:] {
					hs = append(hs, uint64(c)<<uint(c%64))
				}
			}
			in.Events = []Event{{Kind: k, Parent: parent, Hashes: hs}, {Kind: Removed, Hashes: hs}}
		}
		var out Batch
		if err := DecodeBatch(AppendBatch(nil, &in), &out); err != nil {
			t.Fatalf("decode(encode(%+v)): %v", in, err)
		}
		if !batchEqual(&out, &in) {
			t.Fatalf("decode(encode(x)) = %+v, want %+v", out, in)
		}
	})
}
