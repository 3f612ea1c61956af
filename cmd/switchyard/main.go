// Command switchyard is the Switchyard control plane: frontend, workers,
// preflight and bench in one binary. All behaviour lives in internal/cli.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchyard-llm/switchyard/internal/cli"
	"github.com/switchyard-llm/switchyard/internal/sysmon"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "frontend" || os.Args[1] == "up") {
		// The commands that serve the hop: keep the runtime's monitor from
		// waking at 20 µs intervals through every request (see
		// internal/sysmon). Returns only if it did not re-execute.
		if err := sysmon.Quiet(); err != nil {
			fmt.Fprintf(os.Stderr, "switchyard %s: running with the Go runtime's default monitor: re-execute with GODEBUG=%s failed: %v\n", os.Args[1], sysmon.Setting, err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
