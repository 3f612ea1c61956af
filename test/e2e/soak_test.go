//go:build e2e && soak

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoak runs a frontend and three workers on an external nats-server
// under mixed load with disconnects for SOAK_DURATION (default 10m), and
// reports the frontend's goroutines and RSS at the start, the peak and the
// end. After the load stops and idle connections time out, the goroutine
// count must be back at its start: a leak shows as growth. Run it with
// `make soak`; it is not part of CI.
func TestSoak(t *testing.T) {
	d := 10 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("SOAK_DURATION %q: %v", v, err)
		}
	}
	ns := startNATS(t)
	c := startCluster(t, ns.URL(), 3,
		[]string{"--client-idle-timeout", "5s", "--client-stall-timeout", "2s", "--max-inflight", "64"},
		[]string{"--speedup", "20"})
	addr := strings.TrimPrefix(c.url, "http://")

	type sample struct {
		at         time.Duration
		goroutines float64
		rssMB      float64
	}
	type jsonSample struct {
		AtS        float64 `json:"at_s"`
		Goroutines float64 `json:"goroutines"`
		RSSMB      float64 `json:"rss_mb"`
	}
	read := func(since time.Time) sample {
		return sample{time.Since(since), metric(t, c.url, "go_goroutines"), metric(t, c.url, "process_resident_memory_bytes") / 1e6}
	}
	t0 := time.Now()
	start := read(t0)
	peak := start
	var samples []sample

	var counts [6]atomic.Int64 // per behaviour: full stream, non-stream, cancel mid-stream, abrupt close, never read, failures
	names := []string{"stream", "non-stream", "cancel mid-stream", "abrupt close", "never read", "unexpected failures"}
	ctx, stop := context.WithTimeout(context.Background(), d)
	defer stop()
	var wg sync.WaitGroup
	for cl := 0; cl < 8; cl++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(cl), 7))
			for i := 0; ctx.Err() == nil; i++ {
				prompt := fmt.Sprintf("soak client %d topic %d. %s", cl, i%6, strings.Repeat("background ", 30))
				var ok bool
				switch k := rng.IntN(20); {
				case k < 9:
					ok = soakStream(c.url, prompt, 48, false)
					counts[0].Add(1)
				case k < 14:
					r := chat(context.Background(), c.url, prompt, 16)
					ok = r.err == nil || r.status == http.StatusTooManyRequests
					counts[1].Add(1)
				case k < 17:
					ok = soakStream(c.url, prompt, 400, true)
					counts[2].Add(1)
				case k < 19:
					ok = soakAbrupt(addr, prompt)
					counts[3].Add(1)
				default:
					ok = soakNeverRead(addr, prompt)
					counts[4].Add(1)
				}
				if !ok {
					counts[5].Add(1)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	tick := time.NewTicker(10 * time.Second)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			s := read(t0)
			samples = append(samples, s)
			peak.goroutines, peak.rssMB = max(peak.goroutines, s.goroutines), max(peak.rssMB, s.rssMB)
			fmt.Fprintf(os.Stderr, "soak %v: goroutines %.0f, rss %.1f MB\n", s.at.Round(time.Second), s.goroutines, s.rssMB)
		}
	}
	tick.Stop()
	wg.Wait()
	loadEnd := read(t0)
	peak.goroutines, peak.rssMB = max(peak.goroutines, loadEnd.goroutines), max(peak.rssMB, loadEnd.rssMB)
	// Idle client connections close after 5 s and idle worker connections
	// after 90 s (the transport's IdleConnTimeout): wait up to 2 minutes
	// for the goroutines to settle.
	var end sample
	deadline := time.Now().Add(2 * time.Minute)
	for {
		end = read(t0)
		if end.goroutines <= start.goroutines || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	var total int64
	for i := 0; i < 5; i++ {
		total += counts[i].Load()
	}
	t.Logf("soak %v, %d requests:", d, total)
	for i, n := range names {
		t.Logf("  %-20s %d", n, counts[i].Load())
	}
	t.Logf("goroutines: start %.0f, peak %.0f, at load end %.0f, end %.0f (%v after the load)", start.goroutines, peak.goroutines, loadEnd.goroutines, end.goroutines, (end.at - loadEnd.at).Round(time.Second))
	t.Logf("RSS MB:     start %.1f, peak %.1f, at load end %.1f, end %.1f", start.rssMB, peak.rssMB, loadEnd.rssMB, end.rssMB)
	if end.goroutines > start.goroutines {
		t.Errorf("goroutines grew from %.0f to %.0f after the load stopped: a leak", start.goroutines, end.goroutines)
	}
	if end.rssMB > loadEnd.rssMB*1.05 {
		t.Errorf("RSS grew after the load stopped: %.1f → %.1f MB", loadEnd.rssMB, end.rssMB)
	}
	if f := counts[5].Load(); f*100 > total {
		t.Errorf("%d of %d requests failed unexpectedly", f, total)
	}
	js := make([]jsonSample, len(samples))
	for i, s := range samples {
		js[i] = jsonSample{s.at.Seconds(), s.goroutines, s.rssMB}
	}
	if b, err := json.Marshal(js); err == nil {
		t.Logf("samples: %s", b)
	}
}

// soakStream sends a streaming chat request and reads it to the end, or
// cancels it after the first chunk.
func soakStream(url, prompt string, maxTokens int, cancelEarly bool) bool {
	body, _ := json.Marshal(map[string]any{"model": "qwen3-0.6b", "max_tokens": maxTokens, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		return true // shed: the bound working as meant
	}
	if resp.StatusCode != http.StatusOK {
		return false
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if cancelEarly && strings.HasPrefix(line, "data: {") {
			cancel()
			return true
		}
		if line == "data: [DONE]" {
			return true
		}
	}
	return false
}

// soakAbrupt sends a streaming request on a raw connection, reads a little
// and resets the connection.
func soakAbrupt(addr, prompt string) bool {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	body := `{"model":"qwen3-0.6b","stream":true,"max_tokens":300,"messages":[{"role":"user","content":` + strconv.Quote(prompt) + `}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadFull(conn, make([]byte, 256))
	_ = conn.(*net.TCPConn).SetLinger(0) // RST, as a crashed client
	return err == nil
}

// soakNeverRead sends a long streaming request and never reads it; it
// closes the connection after 3 s (the frontend's stall timeout is 2 s).
func soakNeverRead(addr, prompt string) bool {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	body := `{"model":"qwen3-0.6b","stream":true,"max_tokens":4000,"messages":[{"role":"user","content":` + strconv.Quote(prompt) + `}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	time.Sleep(3 * time.Second)
	return true
}
