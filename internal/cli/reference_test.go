package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestCLIReferenceUpToDate: docs/cli.md is what the flags generate, so the
// reference cannot drift. Regenerate it with
// go run ./internal/cli/gendocs > docs/cli.md.
func TestCLIReferenceUpToDate(t *testing.T) {
	t.Setenv(envHealthURL, "") // its default would show in healthcheck's help
	var want bytes.Buffer
	if err := WriteReference(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatalf("%v: generate it with go run ./internal/cli/gendocs > docs/cli.md", err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		g, w := strings.Split(string(got), "\n"), strings.Split(want.String(), "\n")
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] {
				t.Fatalf("docs/cli.md differs from the flags at line %d:\n  file: %q\n  flags: %q\nregenerate it: go run ./internal/cli/gendocs > docs/cli.md", i+1, g[i], w[i])
			}
		}
		t.Fatalf("docs/cli.md has %d lines, the flags give %d; regenerate it: go run ./internal/cli/gendocs > docs/cli.md", len(g), len(w))
	}
}
