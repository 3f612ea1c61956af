package deploy

import (
	"os/exec"
	"strings"
	"testing"
)

// TestMakeTestChecksDataFirst: `make test` looks for the data directory the
// tests read before it vets or runs anything, so a checkout without it gets
// one message at once, not scattered failures minutes later.
func TestMakeTestChecksDataFirst(t *testing.T) {
	out, err := exec.Command("make", "-C", "..", "-n", "test").Output()
	if err != nil {
		t.Fatalf("make -n test: %v (make is needed to run the tests at all)", err)
	}
	var first string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "make") {
			first = l
			break
		}
	}
	if !strings.Contains(first, "test-deps.sh --data-only") {
		t.Errorf("make test's first command is %q; want the data check (scripts/test-deps.sh --data-only)", first)
	}
}
