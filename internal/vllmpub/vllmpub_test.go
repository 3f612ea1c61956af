package vllmpub

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/switchyard-llm/switchyard/internal/engine/sim"
	"github.com/switchyard-llm/switchyard/internal/enginewire"
	"github.com/switchyard-llm/switchyard/internal/kvevents"
	"github.com/switchyard-llm/switchyard/internal/kvindex"
)

func freeEndpoint(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "tcp://" + ln.Addr().String()
}

// replayAll asks p's replay socket for every buffered batch and decodes
// them, with their sequence numbers.
func replayAll(t testing.TB, p *Publisher) ([]uint64, []enginewire.Batch) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial(p.ReplayEndpoint()); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(zmq4.NewMsgFrom([]byte{}, enginewire.AppendSeq(nil, 0))); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	var out []enginewire.Batch
	for {
		m, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		seq, payload, end, err := enginewire.ParseReplay(m.Frames)
		if err != nil {
			t.Fatal(err)
		}
		if end {
			return seqs, out
		}
		var b enginewire.Batch
		if err := enginewire.DecodeBatch(payload, &b); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
		out = append(out, b)
	}
}

// steps publishes n scheduler steps, each storing one new block of a
// chain and removing the block stored two steps before.
func steps(p *Publisher, n int) {
	tokens := make([]uint32, 16*n)
	for i := range tokens {
		tokens[i] = uint32(i)
	}
	hashes := kvindex.HashChain(nil, "", tokens, 16)
	for i := range n {
		parent := kvindex.Root("")
		if i > 0 {
			parent = hashes[i-1]
		}
		ev := []kvevents.Event{{Kind: kvevents.Stored, Parent: parent, Hashes: hashes[i : i+1]}}
		if i >= 2 {
			ev = append(ev, kvevents.Event{Kind: kvevents.Removed, Hashes: hashes[i-2 : i-1]})
		}
		p.PublishStepTokens(ev, &sim.StepTokens{Tokens: tokens[i*16 : (i+1)*16]})
	}
}

func TestQuirks(t *testing.T) {
	type count struct{ batches, stored, removed, rootZero, rootNil int }
	cases := []struct {
		name  string
		q     Quirks
		check func(t *testing.T, seqs []uint64, c count)
	}{
		{"vllm", Quirks{}, func(t *testing.T, seqs []uint64, c count) {
			if seqs[0] != 0 || c.batches != 40 || c.stored != 40 || c.removed != 38 || c.rootNil != 1 || c.rootZero != 0 {
				t.Errorf("first seq %d, %+v", seqs[0], c)
			}
		}},
		{"parent zero, from 1, by count", Quirks{ParentZero: true, FirstSeq: 1, BatchEvents: 16}, func(t *testing.T, seqs []uint64, c count) {
			// 78 events: 4 full batches of 16, 14 held back.
			if seqs[0] != 1 || seqs[len(seqs)-1] != 4 || c.batches != 4 || c.stored+c.removed != 64 || c.rootZero != 1 || c.rootNil != 0 {
				t.Errorf("seqs %v, %+v", seqs, c)
			}
		}},
		{"drop a quarter", Quirks{DropEvents: 0.25, DropSeed: 3}, func(t *testing.T, seqs []uint64, c count) {
			// 78 events, each kept with probability 3/4: 58.5 expected,
			// sd 3.8; the seed is fixed, the margin is for a changed one.
			if n := c.stored + c.removed; n < 45 || n > 72 {
				t.Errorf("%d of 78 events kept, want about 58", n)
			}
			for i := 1; i < len(seqs); i++ {
				if seqs[i] != seqs[i-1]+1 {
					t.Errorf("sequence %v has a gap: drops must not show", seqs)
					break
				}
			}
		}},
		{"skip removals", Quirks{SkipRemovals: true}, func(t *testing.T, seqs []uint64, c count) {
			if c.removed != 0 || c.stored != 40 || c.batches != 40 {
				t.Errorf("%+v", c)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(Config{Endpoint: freeEndpoint(t), ReplayEndpoint: freeEndpoint(t), BlockSize: 16, Quirks: tc.q})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			steps(p, 40)
			seqs, batches := replayAll(t, p)
			if len(seqs) == 0 {
				t.Fatal("replay returned nothing")
			}
			var c count
			c.batches = len(batches)
			for _, b := range batches {
				for _, e := range b.Events {
					switch e.Kind {
					case enginewire.BlockStored:
						c.stored++
						switch {
						case !e.HasParent:
							c.rootNil++
						case e.Parent == 0:
							c.rootZero++
						}
						if len(e.TokenIDs) != 16 {
							t.Errorf("stored event with %d tokens", len(e.TokenIDs))
						}
					case enginewire.BlockRemoved:
						c.removed++
					}
				}
			}
			tc.check(t, seqs, c)
		})
	}
}

func TestQuirksValidate(t *testing.T) {
	for _, q := range []Quirks{{BatchEvents: -1}, {DropEvents: 1.5}, {DropEvents: -0.1}, {FirstSeq: enginewire.ReplayEnd}} {
		if p, err := New(Config{Endpoint: "tcp://127.0.0.1:0", BlockSize: 16, Quirks: q}); err == nil {
			p.Close() // accepted: it bound a socket
			t.Errorf("quirks %+v accepted", q)
		}
	}
}

// An adapter's chain is published as vLLM publishes it: lora_id and
// lora_name set, the name in every block's extra_keys and the cache salt
// after it on the first.
func TestAdapterChainOnTheWire(t *testing.T) {
	p, err := New(Config{Endpoint: freeEndpoint(t), ReplayEndpoint: freeEndpoint(t), BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	salt := kvindex.LoRASalt("sql-adapter", "tenant-a")
	tokens := make([]uint32, 32)
	hashes := kvindex.HashChain(nil, salt, tokens, 16)
	p.PublishStepTokens([]kvevents.Event{{Kind: kvevents.Stored, Parent: kvindex.Root(salt), Hashes: hashes}},
		&sim.StepTokens{Tokens: tokens, Salts: map[uint64]string{hashes[0]: salt}})
	_, batches := replayAll(t, p)
	e := batches[0].Events[0]
	if e.LoraName != "sql-adapter" || e.LoraID == 0 || e.HasParent {
		t.Fatalf("event = %+v, want lora_name sql-adapter, a lora_id, no parent", e)
	}
	var items [2][]string
	if err := e.ForEachExtraKey(func(block int, _, str []byte) { items[block] = append(items[block], string(str)) }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(items) != "[[sql-adapter tenant-a] [sql-adapter]]" {
		t.Errorf("extra_keys = %v", items)
	}
}
