package bench

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MooncakeBlockTokens is the prefix-block size behind Mooncake's hash_ids
// (FAST'25 release: len(hash_ids) == ceil(input_length/512)).
const MooncakeBlockTokens = 512

// TraceRequest is one request of a trace.
type TraceRequest struct {
	At           time.Duration // arrival, relative to the trace's first request
	InputTokens  int
	OutputTokens int
	// HashIDs are Mooncake prefix-block ids: block i covers tokens
	// [512i, 512(i+1)) and an equal id means the same content up to and
	// including that block. Nil for traces without prefix information.
	HashIDs []int64
}

// InferTraceFormat names a trace file's format from its extension: .csv is
// Azure's, anything else (.jsonl) Mooncake's.
func InferTraceFormat(path string) string {
	if strings.EqualFold(filepath.Ext(path), ".csv") {
		return FormatAzure
	}
	return FormatMooncake
}

// ReadTrace reads a trace file in the given format.
func ReadTrace(path, format string) ([]TraceRequest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: open trace: %w", err)
	}
	defer f.Close()
	switch format {
	case FormatMooncake:
		return ReadMooncake(f)
	case FormatAzure:
		return ReadAzure(f)
	}
	return nil, fmt.Errorf("bench: trace format %q: use mooncake or azure", format)
}

// ReadTraceSlice reads a trace file and returns the slice SliceTrace cuts
// from it: what every command that replays a trace (bench trace, simulate,
// ceiling) runs on.
func ReadTraceSlice(path, format string, skip, maxRequests int) ([]TraceRequest, error) {
	reqs, err := ReadTrace(path, format)
	if err != nil {
		return nil, err
	}
	return SliceTrace(reqs, skip, maxRequests)
}

// SliceTrace drops the first skip requests of reqs, keeps at most
// maxRequests of the rest (0: all) and rebases their arrivals so that the
// slice's first request arrives at 0. A trace's early requests can share
// little (the synthetic Mooncake trace's first 1,000 reuse almost no
// prefix), so a slice further in is a workload whose hit ratio rests on
// many requests. reqs is not modified.
func SliceTrace(reqs []TraceRequest, skip, maxRequests int) ([]TraceRequest, error) {
	switch {
	case skip < 0:
		return nil, fmt.Errorf("bench: --skip %d: want >= 0 (0 = from the trace's start)", skip)
	case maxRequests < 0:
		return nil, fmt.Errorf("bench: --max-requests %d: want >= 0 (0 = to the trace's end)", maxRequests)
	case skip >= len(reqs):
		return nil, fmt.Errorf("bench: --skip %d: the trace has only %d requests; skip fewer", skip, len(reqs))
	}
	reqs = reqs[skip:]
	if maxRequests > 0 && len(reqs) > maxRequests {
		reqs = reqs[:maxRequests]
	}
	if skip == 0 {
		return reqs, nil
	}
	out := make([]TraceRequest, len(reqs))
	t0 := reqs[0].At
	for i, r := range reqs {
		out[i] = r
		out[i].At -= t0
	}
	return out, nil
}

type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []int64  `json:"hash_ids"`
}

// maxTraceTimestamp bounds timestamps (ms for Mooncake) so durations cannot
// overflow: about 100 days.
const maxTraceTimestamp = 1e10

// ReadMooncake parses Mooncake JSONL ({timestamp (ms), input_length,
// output_length, hash_ids}). Requests are returned in arrival order; arrival
// times are relative to the earliest one.
func ReadMooncake(r io.Reader) ([]TraceRequest, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	var out []TraceRequest
	var ms []float64
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var m mooncakeLine
		if err := json.Unmarshal(b, &m); err != nil {
			if line == 1 && b[0] != '{' {
				return nil, fmt.Errorf("bench: mooncake line 1 is not a JSON object (%q...): is this an Azure CSV trace? pass --format azure", truncateStr(string(b), 40))
			}
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				// Name the trace's field, not the Go struct behind it.
				want := "a number"
				if te.Field == "hash_ids" {
					want = "an array of block ids (numbers)"
				}
				return nil, fmt.Errorf("bench: mooncake line %d: %s: got a %s, want %s", line, te.Field, te.Value, want)
			}
			return nil, fmt.Errorf("bench: mooncake line %d: %w", line, err)
		}
		if m.Timestamp == nil || m.InputLength == nil || m.OutputLength == nil || m.HashIDs == nil {
			return nil, fmt.Errorf("bench: mooncake line %d: want timestamp, input_length, output_length and hash_ids", line)
		}
		ts, in, outLen := *m.Timestamp, *m.InputLength, *m.OutputLength
		switch {
		case math.IsNaN(ts) || ts < 0 || ts > maxTraceTimestamp:
			return nil, fmt.Errorf("bench: mooncake line %d: timestamp %v out of range", line, ts)
		case in < 1 || in > maxPromptTokens:
			return nil, fmt.Errorf("bench: mooncake line %d: input_length %d out of range 1..%d", line, in, maxPromptTokens)
		case outLen < 0 || outLen > maxPromptTokens:
			return nil, fmt.Errorf("bench: mooncake line %d: output_length %d out of range", line, outLen)
		}
		if want := (in + MooncakeBlockTokens - 1) / MooncakeBlockTokens; len(m.HashIDs) != want {
			return nil, fmt.Errorf("bench: mooncake line %d: %d hash_ids for input_length %d, want %d (512-token blocks)", line, len(m.HashIDs), in, want)
		}
		for _, h := range m.HashIDs {
			if h < 0 {
				return nil, fmt.Errorf("bench: mooncake line %d: negative hash id %d", line, h)
			}
		}
		out = append(out, TraceRequest{InputTokens: in, OutputTokens: outLen, HashIDs: m.HashIDs})
		ms = append(ms, ts)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: read mooncake trace: %w", err)
	}
	return finishTrace(out, ms, float64(time.Millisecond))
}

// azureTimeLayout matches the Azure 2023 trace's TIMESTAMP column, e.g.
// "2023-11-16 18:15:46.6805900" (seven fractional digits, no zone: UTC).
const azureTimeLayout = "2006-01-02 15:04:05.999999999"

// ReadAzure parses the Azure LLM inference trace CSV (TIMESTAMP,
// ContextTokens, GeneratedTokens). Columns are found by header name.
func ReadAzure(r io.Reader) ([]TraceRequest, error) {
	br := bufio.NewReader(r)
	if b, _ := br.Peek(1); len(b) == 1 && b[0] == '{' {
		return nil, errors.New("bench: azure header: the file starts with a JSON object: is this a Mooncake JSONL trace? pass --format mooncake")
	}
	cr := csv.NewReader(br)
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("bench: azure header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))] = i
	}
	ti, ok1 := col["timestamp"]
	ci, ok2 := col["contexttokens"]
	gi, ok3 := col["generatedtokens"]
	if !ok1 || !ok2 || !ok3 {
		return nil, fmt.Errorf("bench: azure header %q: want TIMESTAMP,ContextTokens,GeneratedTokens", strings.Join(head, ","))
	}
	var out []TraceRequest
	var secs []float64
	var t0 time.Time
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("bench: azure trace: %w", err)
		}
		line, _ := cr.FieldPos(0)
		t, err := time.Parse(azureTimeLayout, strings.TrimSpace(rec[ti]))
		if err != nil {
			return nil, fmt.Errorf("bench: azure line %d: TIMESTAMP: %w", line, err)
		}
		in, err1 := strconv.Atoi(strings.TrimSpace(rec[ci]))
		gen, err2 := strconv.Atoi(strings.TrimSpace(rec[gi]))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bench: azure line %d: token counts %q,%q are not integers", line, rec[ci], rec[gi])
		}
		if in < 1 || in > maxPromptTokens || gen < 0 || gen > maxPromptTokens {
			return nil, fmt.Errorf("bench: azure line %d: token counts %d,%d out of range", line, in, gen)
		}
		if len(out) == 0 {
			t0 = t
		}
		d := t.Sub(t0).Seconds()
		if math.Abs(d) > maxTraceTimestamp/1000 {
			return nil, fmt.Errorf("bench: azure line %d: timestamp %s too far from the first", line, rec[ti])
		}
		out = append(out, TraceRequest{InputTokens: in, OutputTokens: gen})
		secs = append(secs, d)
	}
	return finishTrace(out, secs, float64(time.Second))
}

// finishTrace orders reqs by timestamp (stable, so equal times keep file
// order) and sets At relative to the earliest, with ts in units of unit ns.
func finishTrace(reqs []TraceRequest, ts []float64, unit float64) ([]TraceRequest, error) {
	if len(reqs) == 0 {
		return nil, errors.New("bench: trace has no requests")
	}
	idx := make([]int, len(reqs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return ts[idx[a]] < ts[idx[b]] })
	min := ts[idx[0]]
	out := make([]TraceRequest, len(reqs))
	for i, j := range idx {
		out[i] = reqs[j]
		out[i].At = time.Duration((ts[j] - min) * unit)
	}
	return out, nil
}

// TileTrace repeats reqs k times back to back: copy c starts one mean
// inter-arrival gap after copy c-1 ends, and its hash ids are shifted past
// every id of the copies before it, so copies share no prefix with each
// other while keeping the trace's own sharing within each copy. k <= 1
// returns reqs.
func TileTrace(reqs []TraceRequest, k int) []TraceRequest {
	if k <= 1 || len(reqs) == 0 {
		return reqs
	}
	var maxID int64 = -1
	for _, r := range reqs {
		for _, h := range r.HashIDs {
			maxID = max(maxID, h)
		}
	}
	span := reqs[len(reqs)-1].At
	period := span + span/time.Duration(max(1, len(reqs)-1))
	out := make([]TraceRequest, 0, len(reqs)*k)
	for c := range k {
		off := int64(c) * (maxID + 1)
		for _, r := range reqs {
			t := r
			t.At = r.At + time.Duration(c)*period
			if r.HashIDs != nil {
				t.HashIDs = make([]int64, len(r.HashIDs))
				for i, h := range r.HashIDs {
					t.HashIDs[i] = h + off
				}
			}
			out = append(out, t)
		}
	}
	return out
}

func truncateStr(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
