// Package cli implements the switchyard subcommands. It is the only package
// that reads flags or the environment; every library below it takes a
// validated Config. Each subcommand lives in its own file and registers
// itself with register, so the dispatcher never needs editing.
package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Exit codes shared by every subcommand.
const (
	ExitOK    = 0
	ExitFail  = 1 // the command ran and found a failure (or could not run)
	ExitUsage = 2 // the command line was wrong
)

// Env is what a subcommand gets from the process.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, env Env) int
}

var commands = map[string]command{}

// register adds a subcommand. It panics on a duplicate name: a registry that
// silently overwrites hides wiring mistakes.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("cli: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// Main runs the subcommand named by args[0] and returns the process exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := Env{Stdin: stdin, Stdout: stdout, Stderr: stderr}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "switchyard: unknown command %q\n\n", args[0])
		usage(stderr)
		return ExitUsage
	}
	env.Stderr = &dedupPrefix{w: stderr, name: args[0]}
	return c.run(ctx, args[1:], env)
}

// dedupPrefix drops the library's package prefix where it repeats the
// command's ("switchyard bench: bench: GET /health ..." becomes
// "switchyard bench: GET /health ..."): libraries prefix their errors with
// their package, and most commands are named after theirs. It rewrites
// whole writes, which is how fmt.Fprintf writes a line.
type dedupPrefix struct {
	w    io.Writer
	name string
}

func (d *dedupPrefix) Write(p []byte) (int, error) {
	pre := "switchyard " + d.name + ": "
	q := bytes.ReplaceAll(p, []byte(pre+d.name+": "), []byte(pre))
	q = bytes.ReplaceAll(q, []byte("\n  "+d.name+": "), []byte("\n  ")) // joined errors, one per line
	if _, err := d.w.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: switchyard <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'switchyard <command> -h' for the flags of one command.")
}

// newFlagSet returns a flag set whose -h output starts with a usage line
// and what the command does.
func newFlagSet(name, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: switchyard %s [flags]\n\n%s\n\nflags:\n", name, about)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs and maps the outcome to an exit code:
// -1 means "go on", anything else is the code to return.
func parseFlags(fs *flag.FlagSet, args []string, env Env) int {
	fs.SetOutput(env.Stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "switchyard %s: unexpected argument %q\n", fs.Name(), strings.Join(fs.Args(), " "))
		return ExitUsage
	}
	return -1
}
