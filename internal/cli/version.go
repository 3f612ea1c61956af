package cli

import (
	"context"
	"fmt"
	"runtime/debug"
)

func init() {
	register(command{name: "version", summary: "print the build version", run: runVersion})
}

func runVersion(_ context.Context, _ []string, env Env) int {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	fmt.Fprintln(env.Stdout, "switchyard", v)
	return ExitOK
}
