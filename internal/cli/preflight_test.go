package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-llm/switchyard/internal/preflight/preflighttest"
)

func TestPreflightUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"preflight", "--url", url}, nil, &out, &errb)
	if code != ExitFail || !strings.Contains(errb.String(), "cannot reach "+url+": is `switchyard up` running?") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

func preflightArgs(url string, extra ...string) []string {
	return append([]string{"preflight", "--url", url, "--probe-tokens", "500", "--seed", "7"}, extra...)
}

func TestPreflightHealthyJSON(t *testing.T) {
	f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1"}, {ID: "w2"}}})
	md := filepath.Join(t.TempDir(), "report.md")
	var out, errb bytes.Buffer
	code := Main(context.Background(), preflightArgs(f.URL, "--json", "-", "--markdown", md), nil, &out, &errb)
	if code != ExitOK {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
	var rep struct {
		Schema  string `json:"schema"`
		Verdict string `json:"verdict"`
		Checks  []struct{ Name, Status string }
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, out.String())
	}
	if rep.Schema != "switchyard-preflight/v1" || rep.Verdict != "PASS" || len(rep.Checks) != 8 {
		t.Errorf("report %+v", rep)
	}
	if got := strings.Count(errb.String(), "preflight: ["); got != 8 {
		t.Errorf("stderr has %d progress lines, want 8:\n%s", got, errb.String())
	}
	b, err := os.ReadFile(md)
	if err != nil || !strings.Contains(string(b), "# Switchyard preflight: PASS") {
		t.Errorf("markdown %q, %v", b, err)
	}
}

func TestPreflightDisabledEventsExit1(t *testing.T) {
	f := preflighttest.New(t, preflighttest.Config{Workers: []preflighttest.Worker{{ID: "w1"}, {ID: "w2", Events: "disabled"}}})
	var out, errb bytes.Buffer
	code := Main(context.Background(), preflightArgs(f.URL), nil, &out, &errb)
	if code != ExitFail {
		t.Fatalf("exit %d, want 1\n%s", code, out.String())
	}
	for _, want := range []string{"FAIL kv-events: w2: KV events disabled", "verdict: FAIL"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}
