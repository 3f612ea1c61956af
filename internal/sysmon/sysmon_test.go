package sysmon

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

func TestWithSetting(t *testing.T) {
	for _, c := range []struct {
		godebug, mode, want string
		exec                bool
	}{
		{"", "", Setting, true},
		{"madvdontneed=1", "", "madvdontneed=1," + Setting, true},
		{"schedtrace=1000", "", "schedtrace=1000", false},
		{"gctrace=1, schedtrace=0", "", "gctrace=1, schedtrace=0", false}, // the user's 0 stands
		{"", "default", "", false},
		{"http2debug=1", "default", "http2debug=1", false},
		{"", "reexecuted", "", false}, // never twice
	} {
		got, ok := withSetting(c.godebug, c.mode)
		if got != c.want || ok != c.exec {
			t.Errorf("withSetting(%q, %q) = %q, %v; want %q, %v", c.godebug, c.mode, got, ok, c.want, c.exec)
		}
	}
}

// TestQuietReexecs runs this test binary as a child that calls Quiet: the
// child must come back as the same process with the setting in effect.
func TestQuietReexecs(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = []string{"SYSMON_HELPER=1", "GODEBUG=gctrace=0"}
	for _, kv := range os.Environ() { // the first of two entries is the one read
		if !strings.HasPrefix(kv, "GODEBUG=") && !strings.HasPrefix(kv, Env+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 2 {
		t.Fatalf("helper printed %q", out)
	}
	if lines[0] != "gctrace=0,"+Setting {
		t.Errorf("after Quiet: GODEBUG=%q; want %q", lines[0], "gctrace=0,"+Setting)
	}
	if pid, _ := strconv.Atoi(lines[1]); pid != cmd.Process.Pid {
		t.Errorf("re-executed as pid %d, started as %d: it must stay the same process", pid, cmd.Process.Pid)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("SYSMON_HELPER") == "1" {
		if err := Quiet(); err != nil {
			println("Quiet:", err.Error())
			os.Exit(3)
		}
		os.Stdout.WriteString(os.Getenv("GODEBUG") + " " + strconv.Itoa(os.Getpid()) + "\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}
