package cli

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
)

func init() {
	register(command{name: "version", summary: "print the build version: module version, VCS revision and time, Go version", run: runVersion})
}

func runVersion(_ context.Context, args []string, env Env) int {
	fs := newFlagSet("version", "Prints the module version, VCS revision and time, and Go version of this build\n(also: switchyard --version, switchyard -v).")
	if code := parseFlags(fs, args, env); code >= 0 {
		return code
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(env.Stdout, "switchyard (no build information: built without module support)")
		return ExitOK
	}
	fmt.Fprintln(env.Stdout, versionLine(bi))
	return ExitOK
}

// versionLine describes a build: "switchyard v1.2.3 rev 0123abcd4567
// (2026-12-01T04:21:27Z, modified) go1.26.0". The go command stamps the VCS
// settings when it builds inside a checkout (go build, make build); go run
// and builds outside one have none, and say so.
func versionLine(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	set := map[string]string{}
	for _, s := range bi.Settings {
		set[s.Key] = s.Value
	}
	rev := "no VCS revision (built by go run or outside a git checkout; use make build)"
	if r := set["vcs.revision"]; r != "" {
		rev = "rev " + r[:min(12, len(r))]
		var notes []string
		if t := set["vcs.time"]; t != "" {
			notes = append(notes, t)
		}
		if set["vcs.modified"] == "true" {
			notes = append(notes, "modified")
		}
		if len(notes) > 0 {
			rev += " (" + strings.Join(notes, ", ") + ")"
		}
	}
	return fmt.Sprintf("switchyard %s %s %s", v, rev, bi.GoVersion)
}
