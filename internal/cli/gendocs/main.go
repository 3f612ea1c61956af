// Command gendocs writes the CLI reference to stdout:
//
//	go run ./internal/cli/gendocs > docs/cli.md
package main

import (
	"fmt"
	"os"

	"github.com/switchyard-llm/switchyard/internal/cli"
)

func main() {
	// healthcheck's --url default comes from this variable; the reference
	// shows the built-in one.
	os.Unsetenv("SWITCHYARD_HEALTH_URL")
	if err := cli.WriteReference(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
