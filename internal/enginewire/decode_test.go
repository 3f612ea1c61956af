package enginewire

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the .golden files from the decoder's output")

// view is a Batch as the golden files show it: hashes in hex, extra keys
// as their items.
type view struct {
	TS        float64     `json:"ts"`
	DPRank    *int        `json:"dp_rank,omitempty"`
	Events    []eventView `json:"events"`
	EventsLen int         `json:"n_events"`
}

type eventView struct {
	Kind      string     `json:"kind"`
	Hashes    []string   `json:"block_hashes,omitempty"`
	Parent    string     `json:"parent,omitempty"`
	Tokens    int        `json:"n_tokens,omitempty"`
	FirstTok  uint32     `json:"first_token,omitempty"`
	BlockSize int        `json:"block_size,omitempty"`
	Medium    string     `json:"medium"`
	MedName   string     `json:"medium_name,omitempty"`
	LoraID    int64      `json:"lora_id,omitempty"`
	Lora      string     `json:"lora_name,omitempty"`
	Salt      string     `json:"cache_salt,omitempty"`
	Extra     [][]string `json:"extra_keys,omitempty"`
	Group     int        `json:"group_idx,omitempty"`
	Skip      string     `json:"skip,omitempty"`
}

func viewOf(t testing.TB, b *Batch) view {
	v := view{TS: b.TS, EventsLen: len(b.Events)}
	if b.HasDPRank {
		r := b.DPRank
		v.DPRank = &r
	}
	for i := range b.Events {
		e := &b.Events[i]
		ev := eventView{Kind: e.Kind.String(), Tokens: len(e.TokenIDs), BlockSize: e.BlockSize,
			Medium: e.Medium.String(), LoraID: e.LoraID, Lora: e.LoraName, Salt: e.CacheSalt, Group: e.GroupIdx, Skip: e.Skip.String()}
		if e.Medium == MediumUnknown {
			ev.MedName = e.MediumName
		}
		if len(e.TokenIDs) > 0 {
			ev.FirstTok = e.TokenIDs[0]
		}
		for _, h := range e.BlockHashes {
			ev.Hashes = append(ev.Hashes, fmt.Sprintf("%016x", h))
		}
		if e.HasParent {
			ev.Parent = fmt.Sprintf("%016x", e.Parent)
		}
		if err := e.ForEachExtraKey(func(block int, item, str []byte) {
			for len(ev.Extra) <= block {
				ev.Extra = append(ev.Extra, nil)
			}
			s := fmt.Sprintf("raw:%x", item)
			if str != nil {
				s = "str:" + string(str)
			}
			ev.Extra[block] = append(ev.Extra[block], s)
		}); err != nil {
			t.Errorf("event %d extra keys: %v", i, err)
		}
		v.Events = append(v.Events, ev)
	}
	return v
}

func TestGoldenPayloads(t *testing.T) {
	files, err := filepath.Glob("testdata/*.msgpack")
	if err != nil || len(files) < 8 {
		t.Fatalf("golden payloads: %v (%d files); regenerate with testdata/gen_golden.py", err, len(files))
	}
	var b Batch
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".msgpack")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := DecodeBatch(data, &b); err != nil {
				t.Fatalf("DecodeBatch: %v", err)
			}
			got, _ := json.MarshalIndent(viewOf(t, &b), "", "  ")
			got = append(got, '\n')
			golden := strings.TrimSuffix(f, ".msgpack") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("decoded %s:\n%s\nwant:\n%s", name, got, want)
			}
		})
	}
}

// TestGoldenFacts pins the facts the golden files encode, so an -update
// cannot silently accept a wrong decoder.
func TestGoldenFacts(t *testing.T) {
	dec := func(name string) *Batch {
		t.Helper()
		data, err := os.ReadFile("testdata/" + name + ".msgpack")
		if err != nil {
			t.Fatal(err)
		}
		var b Batch
		if err := DecodeBatch(data, &b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return &b
	}
	b := dec("vllm_map_events")
	if got := b.Events[0].BlockHashes; len(got) != 2 || got[0] != ^uint64(0) || got[1] != 1<<63 {
		t.Errorf("unsigned 64-bit hashes = %x", got)
	}
	if b.Events[0].HasParent || b.Events[0].BlockSize != 16 || len(b.Events[0].TokenIDs) != 32 {
		t.Errorf("first BlockStored = %+v", b.Events[0])
	}
	if k := b.Events[2].Kind; k != AllBlocksCleared {
		t.Errorf("third event kind = %v", k)
	}
	b = dec("vllm_bin_hashes")
	// A bin hash is the digest's last 8 bytes, big-endian.
	d := sha256.Sum256([]byte("block-1"))
	if got, want := b.Events[0].BlockHashes[0], binary.BigEndian.Uint64(d[24:]); got != want {
		t.Errorf("bin hash = %x, want %x", got, want)
	}
	p := sha256.Sum256([]byte("block-2"))
	if got, want := b.Events[0].Parent, binary.BigEndian.Uint64(p[24:]); got != want {
		t.Errorf("bin parent = %x, want %x", got, want)
	}
	if got := b.Events[1].BlockHashes[1]; got != 0x0102 {
		t.Errorf("short bin hash = %x, want 102", got)
	}
	b = dec("sglang_signed")
	if got := b.Events[0].BlockHashes[0]; got != ^uint64(1) {
		t.Errorf("signed -2 = %x, want fffffffffffffffe", got)
	}
	if got := b.Events[1]; got.Medium != MediumCPU || got.Parent != ^uint64(1) || len(got.TokenIDs) != 8 {
		t.Errorf("partial CPU_PINNED page = %+v", got)
	}
	if got := b.Events[2]; got.Medium != MediumDisk || got.BlockHashes[0] != 1<<63 {
		t.Errorf("DISK removal = %+v", got)
	}
	if !b.HasDPRank || b.DPRank != 1 {
		t.Errorf("dp rank = %d %v", b.DPRank, b.HasDPRank)
	}
	b = dec("sglang_map_batch")
	if !b.HasDPRank || b.DPRank != 2 {
		t.Errorf("attn_dp_rank = %d %v", b.DPRank, b.HasDPRank)
	}
	b = dec("forward_compat")
	if len(b.Events) != 4 || b.Events[0].Medium != MediumUnknown || b.Events[0].MediumName != "NVME_OF" || b.Events[0].LoraName != "adapter-x" {
		t.Errorf("forward-compatible batch = %+v", b.Events)
	}
	if b.Events[3].Kind != 0 {
		t.Errorf("unknown event type decoded as %v", b.Events[3].Kind)
	}
	b = dec("third_party_engine")
	if e := b.Events[0]; !e.HasParent || e.Parent != 0 || len(e.BlockHashes) != 3 || e.BlockHashes[2] != ^uint64(2) || len(e.TokenIDs) != 48 {
		t.Errorf("root block with parent 0, three blocks = %+v", e)
	}
	if got := b.Events[0].TokenIDs[47]; got != 1<<31+47 {
		t.Errorf("token id above 2^31 = %d", got)
	}
	if e := b.Events[2]; e.LoraID != 3 || e.LoraName != "sql-adapter" || e.RawExtraKeys == nil {
		t.Errorf("adapter block = %+v", e)
	}
	b = dec("third_party_map_minimal")
	if e := b.Events[0]; e.HasParent || e.Medium != MediumGPU || e.LoraName != "" {
		t.Errorf("minimal root block = %+v", e)
	}
	if e := b.Events[1]; e.LoraID != 7 || e.LoraName != "" || e.HasParent {
		t.Errorf("block with lora_id alone = %+v", e)
	}
	b = dec("skipped_groups")
	for i, want := range []Skip{SkipGroup, SkipSpec, SkipGroup, SkipNone} {
		if got := b.Events[i].Skip; got != want {
			t.Errorf("event %d skip = %v, want %v", i, got, want)
		}
	}
}

// TestIntegerWidths feeds every msgpack integer encoding of a hash.
func TestIntegerWidths(t *testing.T) {
	cases := []struct {
		name string
		enc  []byte
		want uint64
	}{
		{"positive fixint", []byte{0x05}, 5},
		{"negative fixint", []byte{0xff}, ^uint64(0)},
		{"uint8", []byte{0xcc, 0xfe}, 0xfe},
		{"uint16", []byte{0xcd, 0xbe, 0xef}, 0xbeef},
		{"uint32", []byte{0xce, 0xde, 0xad, 0xbe, 0xef}, 0xdeadbeef},
		{"uint64", []byte{0xcf, 0x80, 0, 0, 0, 0, 0, 0, 1}, 1<<63 | 1},
		{"int8", []byte{0xd0, 0x80}, uint64(0xffffffffffffff80)},
		{"int16", []byte{0xd1, 0xff, 0xfe}, ^uint64(1)},
		{"int32", []byte{0xd2, 0x7f, 0xff, 0xff, 0xff}, 0x7fffffff},
		{"int64", []byte{0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0}, 1 << 63},
		{"bin8 sha256-sized", append([]byte{0xc4, 32}, bytes.Repeat([]byte{0xaa}, 24)...), 0},
		{"bin16", []byte{0xc5, 0, 3, 1, 2, 3}, 0x010203},
		{"bin32", []byte{0xc6, 0, 0, 0, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8}, 0x0102030405060708},
	}
	// The sha256-sized case: 24 bytes of 0xaa then 8 chosen bytes.
	cases[10].enc = append(cases[10].enc, 0, 0, 0, 0, 0, 0, 0x12, 0x34)
	cases[10].want = 0x1234
	var b Batch
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// [0, [["BlockRemoved", [hash]]]]
			p := append([]byte{0x92, 0x00, 0x91, 0x92, 0xac}, "BlockRemoved"...)
			p = append(append(p, 0x91), c.enc...)
			if err := DecodeBatch(p, &b); err != nil {
				t.Fatal(err)
			}
			if got := b.Events[0].BlockHashes[0]; got != c.want {
				t.Errorf("hash = %x, want %x", got, c.want)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	cases := map[string][]byte{
		"empty":                 {},
		"not a container":       {0xa3, 'a', 'b', 'c'},
		"truncated array":       {0x93, 0xcb},
		"no events":             {0x81, 0xa2, 't', 's', 0x00},
		"events not an array":   {0x92, 0x00, 0x05},
		"event not a container": {0x92, 0x00, 0x91, 0x05},
		"empty event":           {0x92, 0x00, 0x91, 0x90},
		"map event no type":     {0x92, 0x00, 0x91, 0x81, 0xa1, 'x', 0x01},
		"negative token":        append(append([]byte{0x92, 0x00, 0x91, 0x94, 0xab}, "BlockStored"...), 0x91, 0x01, 0xc0, 0x91, 0xff),
		"token not int":         append(append([]byte{0x92, 0x00, 0x91, 0x82, 0xa4, 't', 'y', 'p', 'e', 0xab}, "BlockStored"...), 0xa9, 't', 'o', 'k', 'e', 'n', '_', 'i', 'd', 's', 0x91, 0xa1, 'x'),
		"hash is a string":      append(append([]byte{0x92, 0x00, 0x91, 0x92, 0xac}, "BlockRemoved"...), 0x91, 0xa1, 'x'),
		"empty bin hash":        append(append([]byte{0x92, 0x00, 0x91, 0x92, 0xac}, "BlockRemoved"...), 0x91, 0xc4, 0x00),
		"trailing bytes":        {0x92, 0x00, 0x90, 0x00},
		"huge array count":      {0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"reserved type byte":    {0x93, 0x00, 0x90, 0xc1},
		"bad seq frame":         nil,
	}
	deep := bytes.Repeat([]byte{0x91}, 100)
	cases["nested too deep"] = append([]byte{0x93, 0x00, 0x90}, deep...)
	var b Batch
	for name, data := range cases {
		if data == nil {
			continue
		}
		err := DecodeBatch(data, &b)
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	if _, _, _, err := ParseLive([][]byte{{}, {1, 2}, {0x90}}); !errors.Is(err, ErrMalformed) {
		t.Errorf("short seq frame: %v", err)
	}
	if _, _, _, err := ParseLive([][]byte{{}, make([]byte, 8)}); !errors.Is(err, ErrMalformed) {
		t.Errorf("two frames: %v", err)
	}
	if _, _, _, err := ParseReplay([][]byte{{1}}); !errors.Is(err, ErrMalformed) {
		t.Errorf("one-frame replay: %v", err)
	}
}

func TestFrames(t *testing.T) {
	seq5 := AppendSeq(nil, 5)
	end := AppendSeq(nil, ReplayEnd)
	topic, seq, payload, err := ParseLive([][]byte{[]byte("kv@10.0.0.1:8000@qwen"), seq5, {0x90}})
	if err != nil || string(topic) != "kv@10.0.0.1:8000@qwen" || seq != 5 || len(payload) != 1 {
		t.Errorf("ParseLive = %q %d %x %v", topic, seq, payload, err)
	}
	cases := []struct {
		name   string
		frames [][]byte
		seq    uint64
		end    bool
	}{
		{"vllm 0.26", [][]byte{{}, []byte("topic"), seq5, {0x90}}, 5, false},
		{"vllm 0.26 end", [][]byte{{}, {}, end, {}}, ReplayEnd, true},
		{"older vllm / sglang", [][]byte{{}, seq5, {0x90}}, 5, false},
		{"older end", [][]byte{{}, end, {}}, ReplayEnd, true},
		{"no delimiter", [][]byte{seq5, {0x90}}, 5, false},
	}
	for _, c := range cases {
		seq, _, isEnd, err := ParseReplay(c.frames)
		if err != nil || seq != c.seq || isEnd != c.end {
			t.Errorf("%s: ParseReplay = %d %v %v", c.name, seq, isEnd, err)
		}
	}
}

func TestDecodeReusesStorage(t *testing.T) {
	data, err := os.ReadFile("testdata/vllm_map_events.msgpack")
	if err != nil {
		t.Fatal(err)
	}
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
		t.Errorf("DecodeBatch allocates %.1f times per batch in steady state, want 0", allocs)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.msgpack")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	var b Batch
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := DecodeBatch(data, &b); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		for i := range b.Events {
			_ = b.Events[i].ForEachExtraKey(func(int, []byte, []byte) {})
		}
	})
}
