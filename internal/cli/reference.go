package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteReference writes the CLI reference (docs/cli.md) from the commands'
// own --help, so the document cannot drift from the flags:
// `go run ./internal/cli/gendocs > docs/cli.md` regenerates it, and a test
// fails when the committed file differs.
func WriteReference(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString(`# CLI reference

Generated from the commands' flags by ` + "`go run ./internal/cli/gendocs > docs/cli.md`" + `; a unit test fails when
this file differs from what it generates. ` + "`switchyard CMD --help`" + ` (or ` + "`switchyard help CMD`" + `) prints the
same text.

Exit codes, for every command: **0** ok; **1** the command ran and something failed (a check, requests past
` + "`bench --max-error-rate`" + `, a server that is not there); **2** the command line was wrong (an unknown flag, a bad
value, a missing input file). Data goes to stdout; progress, warnings and logs to stderr. A flag that takes a key
also reads it from the environment (` + "`$" + envAPIKey + "`, `$" + envAdminKey + "`, `$" + envWorkerKey + "`" + `),
which keeps it out of the process list.

`)
	names := commandNames()
	b.WriteString("| command | what it does |\n|---|---|\n")
	for _, n := range names {
		fmt.Fprintf(&b, "| [`%s`](#switchyard-%s) | %s |\n", n, n, commands[n].summary)
	}
	for _, n := range names {
		fmt.Fprintf(&b, "\n## switchyard %s\n\n", n)
		if err := helpBlock(&b, n); err != nil {
			return err
		}
		if n == "bench" {
			scenarios := make([]string, 0, len(benchScenarios))
			for s := range benchScenarios {
				scenarios = append(scenarios, string(s))
			}
			// bench overload parses its own flags (its clients are
			// tenants, not one load shape), so it is not in benchScenarios.
			scenarios = append(scenarios, "overload")
			slices.Sort(scenarios)
			for _, s := range scenarios {
				fmt.Fprintf(&b, "\n### switchyard bench %s\n\n", s)
				if err := helpBlock(&b, n, s); err != nil {
					return err
				}
			}
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// helpBlock appends one command's --help as a fenced block.
func helpBlock(b *bytes.Buffer, args ...string) error {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), append(args, "--help"), nil, &out, &errb); code != ExitOK {
		return fmt.Errorf("cli: %s --help exited %d: %s", strings.Join(args, " "), code, errb.String())
	}
	b.WriteString("```text\n")
	b.Write(bytes.TrimRight(out.Bytes(), "\n"))
	b.WriteString("\n```\n")
	return nil
}
