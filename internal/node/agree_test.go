package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-llm/switchyard/internal/bus"
	"github.com/switchyard-llm/switchyard/internal/frontend"
)

// TestHealthyDeploymentAgreesUnderLoad: real simulated engines behind a
// real frontend and NATS, many concurrent requests sharing prefixes (new
// prefixes raced by concurrent requests, repeats, streams and not, a small
// KV cache that evicts), and a remote-prefill pool: the index agrees with
// what the engines serve, and no worker is ever found inconsistent.
func TestHealthyDeploymentAgreesUnderLoad(t *testing.T) {
	c := startCluster(t, FrontendConfig{Disagg: "never"}, 0,
		workerSpec{id: "a1", role: bus.RoleAggregated}, workerSpec{id: "a2", role: bus.RoleAggregated},
		workerSpec{id: "a3", role: bus.RoleAggregated})
	const clients, perClient = 8, 40
	send := func(i, j int) error {
		// 10 system prompts of ~300 tokens shared by everyone, each with a
		// short question of its own: repeats and concurrent first
		// sightings of the same prefix.
		body := map[string]any{"model": "qwen3-0.6b", "prompt": prompt(300, (i*perClient+j)%10) + fmt.Sprint(" question ", i, j),
			"max_tokens": 6, "stream": j%2 == 0}
		b, _ := json.Marshal(body)
		resp, err := http.Post(c.fe.URL()+"/v1/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d: %s", resp.StatusCode, raw)
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Go(func() {
			for j := range perClient {
				if err := send(i, j); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var judged, disagreed uint64
	for _, wh := range settledHealth(t, c.fe.Server()).Workers {
		ag := wh.Agreement
		t.Logf("%s: %+v", wh.ID, *ag)
		if ag.Trips != 0 || wh.Events.State != frontend.StateHealthy {
			t.Errorf("%s: events %s (%s), agreement tripped %d times", wh.ID, wh.Events.State, wh.Events.Cause, ag.Trips)
		}
		judged += ag.Requests
		disagreed += ag.Blind + ag.Stale
	}
	// Every request after the first of each prefix is a hit on some worker.
	if judged < clients*perClient/2 {
		t.Errorf("%d responses judged of %d sent, want most", judged, clients*perClient)
	}
	if 10*disagreed > judged {
		t.Errorf("%d of %d judged responses disagreed, want under a tenth", disagreed, judged)
	}
}

// TestRemotePrefillDeploymentAgrees: with every prefill remote, the decode
// workers' cached tokens include the pulled KV, so the decode leg is not
// judged; the prefill leg is, on the prefill worker's own cache report.
// Nobody turns inconsistent.
func TestRemotePrefillDeploymentAgrees(t *testing.T) {
	c := startCluster(t, FrontendConfig{Disagg: "always"}, 0,
		workerSpec{id: "p1", role: bus.RolePrefill}, workerSpec{id: "d1", role: bus.RoleDecode})
	for i := range 30 {
		c.complete(t, map[string]any{"model": "qwen3-0.6b", "prompt": prompt(400, i%3), "max_tokens": 4})
	}
	for _, wh := range settledHealth(t, c.fe.Server()).Workers {
		ag := wh.Agreement
		t.Logf("%s: %+v", wh.ID, *ag)
		if ag.Trips != 0 || ag.Blind+ag.Stale != 0 {
			t.Errorf("%s: agreement %+v", wh.ID, *ag)
		}
		if wh.ID == "p1" && ag.Requests < 20 {
			t.Errorf("prefill worker judged on %d of 30 prefills (27 repeat a prompt)", ag.Requests)
		}
	}
}

// settledHealth is the frontend's health once every response is judged: a
// blind one waits a grace for its KV events before it counts.
func settledHealth(t *testing.T, s *frontend.Server) frontend.Health {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h := s.Health()
		pending := 0
		for _, w := range h.Workers {
			if w.Agreement != nil {
				pending += w.Agreement.Pending
			}
		}
		if pending == 0 {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d responses still waiting to be judged after 20s", pending)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
