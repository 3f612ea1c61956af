//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGrafanaDashboardMetrics checks that every metric the Grafana
// dashboard in deploy/grafana queries exists on a live frontend's /metrics
// (a renamed metric would leave a panel silently empty), and that the
// dashboard is well formed: each panel has a datasource and targets with
// a refId and an expression.
func TestGrafanaDashboardMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/switchyard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				Type string `json:"type"`
				UID  string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("dashboard uid %q title %q: want both", dash.UID, dash.Title)
	}

	// A live frontend with a prefill pool (gate, links), a worker with
	// events off, traffic and one bad request, so labelled series exist.
	url := up(t, "--workers", "2", "--prefill-workers", "1", "--kv-events-off", "1", "--speedup", "20")
	for i := 0; i < 3; i++ {
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(
			`{"model":"qwen3-0.6b","prompt":"the grafana dashboard reads these metrics","max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{bad`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var live map[string]bool
	eventually(t, 15*time.Second, "link throughput is on /metrics (probes ran)", func() bool {
		body, err := httpGet(url + "/metrics")
		if err != nil {
			return false
		}
		live = map[string]bool{}
		for _, line := range strings.Split(body, "\n") {
			if line == "" || line[0] == '#' {
				continue
			}
			name := line
			if i := strings.IndexAny(line, "{ "); i >= 0 {
				name = line[:i]
			}
			live[name] = true
		}
		return live["switchyard_link_throughput_bytes_per_second"]
	})

	metricRe := regexp.MustCompile(`\bswitchyard_[a-z0-9_]+`)
	var queried []string
	targets := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" {
			t.Errorf("panel %q: want the prometheus datasource", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			targets++
			if tg.RefID == "" || tg.Expr == "" {
				t.Errorf("panel %q: target %+v lacks refId or expr", p.Title, tg)
			}
			names := metricRe.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %q queries no switchyard metric", p.Title, tg.Expr)
			}
			queried = append(queried, names...)
		}
	}
	slices.Sort(queried)
	queried = slices.Compact(queried)
	for _, name := range queried {
		if !live[name] {
			t.Errorf("the dashboard queries %s, which a live /metrics does not have", name)
		}
	}
	if !t.Failed() {
		t.Logf("%d panels' %d queries use %d metrics, all on a live /metrics", len(dash.Panels), targets, len(queried))
	}
}
