package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/kvpayload"
	"github.com/switchyard-llm/switchyard/internal/openai"
)

// fakeLeaser records leases; release is called by the test.
type fakeLeaser struct {
	mu     sync.Mutex
	leases map[string]func()
	hashes map[string][]uint64
}

func (l *fakeLeaser) Lease(hashes []uint64, release func()) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tok := fmt.Sprintf("lease-%d", len(l.leases)+1)
	l.leases[tok], l.hashes[tok] = release, hashes
	return tok, nil
}

// fakePuller "transfers" blocks by generating and verifying their payloads
// in-process, from the prefill worker's leased hashes.
type fakePuller struct {
	l         *fakeLeaser
	fail      bool
	blockSize int
}

func (p *fakePuller) Pull(_ context.Context, params map[string]any, want []uint64, insert func(uint64) error) error {
	if p.fail {
		return errors.New("link down")
	}
	p.l.mu.Lock()
	have := p.l.hashes[params["lease"].(string)]
	release := p.l.leases[params["lease"].(string)]
	p.l.mu.Unlock()
	defer release()
	buf := make([]byte, p.blockSize)
	for i, h := range want {
		if i >= len(have) || have[i] != h {
			return fmt.Errorf("block %d not leased", i)
		}
		kvpayload.Fill(h, 0, buf)
		if err := kvpayload.Verify(h, 0, buf); err != nil {
			return err
		}
		if err := insert(h); err != nil {
			return err
		}
	}
	return nil
}

func TestDisaggregatedMatchesAggregated(t *testing.T) {
	l := &fakeLeaser{leases: map[string]func(){}, hashes: map[string][]uint64{}}
	pw, psrv := startWorker(t, Config{ID: "p", Role: "prefill", Leaser: l, KVXferAddr: "10.0.0.1:9000"})
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("pull-fails=%v", fail), func(t *testing.T) {
			puller := &fakePuller{l: l, fail: fail, blockSize: 16 * pw.KVBytesPerToken()}
			dw, dsrv := startWorker(t, Config{ID: "d", Role: "decode", Puller: puller})
			_, asrv := startWorker(t, Config{ID: "a"})
			prompt := essay(600, 9)
			base := map[string]any{"prompt": prompt, "max_tokens": 8, "cache_salt": "t1"}

			pre := map[string]any{"prompt": prompt, "max_tokens": 1, "cache_salt": "t1", "kv_transfer_params": map[string]any{"do_remote_decode": true}}
			code, _, b := post(t, psrv.URL+"/v1/completions", mustJSON(t, pre), "x-request-id", "r1")
			if code != 200 {
				t.Fatalf("prefill: %d %s", code, b)
			}
			var pr struct {
				KVTransferParams map[string]any `json:"kv_transfer_params"`
			}
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.UseNumber()
			if err := dec.Decode(&pr); err != nil {
				t.Fatal(err)
			}
			kvp := pr.KVTransferParams
			if kvp["do_remote_prefill"] != true || kvp["remote_host"] != "10.0.0.1" || kvp["remote_request_id"] != "r1" || kvp["remote_engine_id"] != "p" {
				t.Fatalf("kv_transfer_params %v", kvp)
			}
			ids := kvp["remote_block_ids"].([]any)
			if len(ids) == 0 {
				t.Fatal("no remote_block_ids")
			}
			if pw.Load().UsedBlocks < len(ids) {
				t.Errorf("prefill worker holds %d blocks, want the %d leased pinned", pw.Load().UsedBlocks, len(ids))
			}

			decReq := map[string]any{"prompt": prompt, "max_tokens": 8, "cache_salt": "t1", "kv_transfer_params": kvp}
			code, hdr, b := post(t, dsrv.URL+"/v1/completions", mustJSON(t, decReq))
			if code != 200 {
				t.Fatalf("decode: %d %s", code, b)
			}
			var dr, ar openai.CompletionResponse
			_ = json.Unmarshal(b, &dr)
			// The decode worker reports what it received, not what was asked.
			wantBytes := 0
			if !fail {
				wantBytes = dr.Usage.PromptTokens / 16 * dw.BlockBytes()
			}
			if got := hdr.Get(HeaderKVPulledBytes); got != fmt.Sprint(wantBytes) {
				t.Errorf("%s = %q, want %d", HeaderKVPulledBytes, got, wantBytes)
			}
			if ms, err := strconv.ParseFloat(hdr.Get(HeaderKVPullMS), 64); err != nil || ms < 0 {
				t.Errorf("%s = %q, want a duration in ms", HeaderKVPullMS, hdr.Get(HeaderKVPullMS))
			}
			_, _, b = post(t, asrv.URL+"/v1/completions", mustJSON(t, base))
			_ = json.Unmarshal(b, &ar)
			if dr.Choices[0].Text != ar.Choices[0].Text || dr.Usage.CompletionTokens != ar.Usage.CompletionTokens || dr.Usage.PromptTokens != ar.Usage.PromptTokens {
				t.Errorf("disaggregated %q %+v differs from aggregated %q %+v", dr.Choices[0].Text, dr.Usage, ar.Choices[0].Text, ar.Usage)
			}
			cached := dr.Usage.PromptTokensDetails.CachedTokens
			if fail && cached != 0 {
				t.Errorf("failed pull: cached %d, want 0 (recomputed)", cached)
			}
			if !fail && cached < 16*(len(ids)-1) {
				t.Errorf("pulled %d blocks but cached_tokens = %d", len(ids), cached)
			}
			if !fail && pw.Load().UsedBlocks != 0 {
				t.Errorf("prefill worker still holds %d blocks after the lease was released", pw.Load().UsedBlocks)
			}
			if fail {
				l.mu.Lock()
				for _, rel := range l.leases {
					rel()
				}
				l.mu.Unlock()
			}
		})
	}
}
