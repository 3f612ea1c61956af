package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestEveryHelpExitsZeroOnStdout: help is asked for, so it is output, not
// an error: every spelling prints on stdout, nothing on stderr, exit 0.
func TestEveryHelpExitsZeroOnStdout(t *testing.T) {
	var lines [][]string
	for _, n := range commandNames() {
		lines = append(lines, []string{n, "--help"}, []string{n, "-h"}, []string{"help", n})
	}
	for s := range benchScenarios {
		lines = append(lines, []string{"bench", string(s), "--help"}, []string{"help", "bench", string(s)})
	}
	lines = append(lines, []string{"bench", "overload", "--help"}, []string{"help", "bench", "overload"})
	lines = append(lines, []string{"--help"}, []string{"-h"}, []string{"help"}, []string{"--version"}, []string{"-v"})
	for _, args := range lines {
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, nil, &out, &errb)
		if code != ExitOK || out.Len() == 0 || errb.Len() != 0 {
			t.Errorf("%v: exit %d, %d bytes on stdout, stderr %q; want exit 0, help on stdout, empty stderr", args, code, out.Len(), errb.String())
		}
	}
}

// TestHelpNamesTheCommand: "help up" is up's help, not the command list.
func TestHelpNamesTheCommand(t *testing.T) {
	for _, n := range commandNames() {
		var out bytes.Buffer
		Main(context.Background(), []string{"help", n}, nil, &out, &bytes.Buffer{})
		if !strings.HasPrefix(out.String(), "usage: switchyard "+n) {
			t.Errorf("help %s starts %q; want its own usage line", n, firstLine(out.String()))
		}
	}
}

// TestCommandListAligned: summaries start in one column.
func TestCommandListAligned(t *testing.T) {
	var out bytes.Buffer
	usage(&out)
	col := -1
	for _, l := range strings.Split(out.String(), "\n") {
		name, ok := strings.CutPrefix(l, "  ")
		if !ok || strings.HasPrefix(name, " ") {
			continue
		}
		sp := strings.Index(name, " ")
		i := sp + len(name[sp:]) - len(strings.TrimLeft(name[sp:], " "))
		if col >= 0 && i != col {
			t.Fatalf("summary of %q starts at column %d, others at %d:\n%s", name[:sp], i, col, out.String())
		}
		col = i
	}
}

// TestBadFlagOneLine: a wrong flag is one line naming it and where the help
// is, not the whole usage.
func TestBadFlagOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"preflight", "--fast"},
		{"up", "--workers", "many"},
		{"simulate", "--nope"},
		{"bench", "routing", "--nope"},
		{"linktest", "--nope"},
		{"version", "--nope"},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, nil, &out, &errb)
		msg := errb.String()
		want := "see `switchyard " + strings.Join(args[:len(args)-1-strings.Count(args[len(args)-1], "many")], " ")
		if args[1] == "--workers" {
			want = "see `switchyard up --help`"
		}
		if code != ExitUsage || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, want) || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line with %q", args, code, msg, want)
		}
	}
}

// TestBenchFlagsPerScenario: a flag another scenario takes is refused with
// the scenarios it is for, and help lists only the scenario's own flags.
func TestBenchFlagsPerScenario(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"bench", "routing", "--trace", "x.jsonl"}, nil, &out, &errb)
	if code != ExitUsage || !strings.Contains(errb.String(), "--trace does not apply to the routing scenario (it is for: trace)") {
		t.Errorf("bench routing --trace: exit %d, %q", code, errb.String())
	}
	out.Reset()
	Main(context.Background(), []string{"bench", "routing", "--help"}, nil, &out, &errb)
	if strings.Contains(out.String(), "--trace") || !strings.Contains(out.String(), "--prefixes") {
		t.Errorf("bench routing --help lists other scenarios' flags or misses its own:\n%s", out.String())
	}
}

// TestCeilingHasNoSchedulerFlags: ceiling sizes a cache; the scheduler's
// flags would do nothing there.
func TestCeilingHasNoSchedulerFlags(t *testing.T) {
	var out bytes.Buffer
	Main(context.Background(), []string{"ceiling", "--help"}, nil, &out, &bytes.Buffer{})
	for _, f := range []string{"--max-num-seqs", "--max-num-batched-tokens", "--speedup", "--seed"} {
		if strings.Contains(out.String(), f+" ") {
			t.Errorf("ceiling --help lists %s", f)
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// TestOutputsCheckedBeforeRun: an output a run could not write at its end
// is refused before the run starts (the URLs here refuse connections, so a
// run would fail differently, with 1).
func TestOutputsCheckedBeforeRun(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"bench", "routing", "--url", "http://127.0.0.1:1", "--json", dir + "/no/such/dir/out.json"},
		{"bench", "routing", "--url", "http://127.0.0.1:1", "--plot", dir},
		{"preflight", "--url", "http://127.0.0.1:1", "--markdown", dir + "/missing/p.md"},
		{"preflight", "--url", "http://127.0.0.1:1", "--json", "--prompt-tokens"},
		{"linktest", "--url", "http://127.0.0.1:1", "--json", dir + "/missing/l.json"},
		{"simulate", "--trace", simTrace, "--json", dir + "/missing/s.json"},
	} {
		var out, errb bytes.Buffer
		code := Main(context.Background(), args, nil, &out, &errb)
		if code != ExitUsage || !strings.Contains(errb.String(), "--") {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming the flag", args, code, errb.String())
		}
	}
}

// TestJSONDashIsStdout: --json - puts the JSON document alone on stdout.
func TestJSONDashIsStdout(t *testing.T) {
	var out, errb bytes.Buffer
	code := Main(context.Background(), []string{"simulate", "--trace", simTrace, "--max-requests", "50", "--workers", "2", "--json", "-"}, nil, &out, &errb)
	var rep map[string]any
	if code != ExitOK || json.Unmarshal(out.Bytes(), &rep) != nil || rep["runs"] == nil {
		t.Fatalf("simulate --json -: exit %d, stdout is not the report:\n%.300s\nstderr %.300s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "TTFT") {
		t.Errorf("the table did not go to stderr: %.300s", errb.String())
	}
}

// TestClientURLAndKeyEnv: the client base URL an OpenAI SDK takes is
// accepted, and the keys come from the variables the frontend reads.
func TestClientURLAndKeyEnv(t *testing.T) {
	t.Setenv(envAPIKey, "api-from-env")
	t.Setenv(envAdminKey, "admin-from-env")
	env := Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	cfg, _, _, code := parseBench([]string{"routing", "--url", "http://h:8000/v1/"}, env)
	if code != -1 || cfg.URL != "http://h:8000" || cfg.APIKey != "api-from-env" || cfg.AdminKey != "admin-from-env" {
		t.Errorf("bench: code %d url %q keys %q %q", code, cfg.URL, cfg.APIKey, cfg.AdminKey)
	}
	pcfg, _, _, code := parsePreflight([]string{"--url", "http://h:8000/v1"}, env)
	if code != -1 || pcfg.URL != "http://h:8000" || pcfg.APIKey != "api-from-env" || pcfg.AdminKey != "admin-from-env" {
		t.Errorf("preflight: code %d url %q keys %q %q", code, pcfg.URL, pcfg.APIKey, pcfg.AdminKey)
	}
	lc, code := parseLinktest([]string{"--url", "http://h:8000/v1"}, env)
	if code != -1 || lc.url != "http://h:8000" || lc.adminKey != "admin-from-env" {
		t.Errorf("linktest: code %d url %q key %q", code, lc.url, lc.adminKey)
	}
}

// TestNoInternalPackageNames: errors speak of the user's input, not of the
// packages or Go types behind it.
func TestNoInternalPackageNames(t *testing.T) {
	bad := t.TempDir() + "/bad.jsonl"
	if err := os.WriteFile(bad, []byte(`{"timestamp":0,"input_length":"12","output_length":3,"hash_ids":[1]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"simulate", "--trace", bad},
		{"simulate", "--trace", simTrace, "--max-requests", "5", "--compare", bad + ".missing"},
		{"ceiling", "--trace", bad},
	} {
		var out, errb bytes.Buffer
		Main(context.Background(), args, nil, &out, &errb)
		s := errb.String()
		for _, leak := range []string{": bench:", ": simulate:", "Go struct", "mooncakeLine"} {
			if strings.Contains(s, leak) {
				t.Errorf("%v: stderr %q names %q", args, s, leak)
			}
		}
		if s == "" {
			t.Errorf("%v: no error at all", args)
		}
	}
}
