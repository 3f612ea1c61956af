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
	"strconv"
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
// Help goes to stdout and exits 0, as other command-line tools do; a wrong
// command line gets one line on stderr naming what is wrong, and exits 2.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	env := Env{Stdin: stdin, Stdout: stdout, Stderr: stderr}
	if len(args) == 0 {
		usage(stderr)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return ExitOK
	case "-v", "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return ExitOK
		}
		// "help CMD [SCENARIO]" is "CMD [SCENARIO] --help".
		args = append(append([]string{}, args[1:]...), "--help")
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "switchyard: unknown command %q; see `switchyard --help`\n", args[0])
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
	if bytes.HasPrefix(q, []byte(pre)) {
		q = dropPackagePrefixes(q)
	}
	if _, err := d.w.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

// internalPackages are the library packages whose names prefix their
// errors; a user has no use for them ("switchyard simulate: bench: open
// trace" says "switchyard simulate: open trace").
var internalPackages = []string{"bench", "bridge", "bus", "enginetok", "enginewire", "frontend", "gate", "hf", "kvevents",
	"kvindex", "kvpayload", "kvxfer", "linkemu", "node", "openai", "perfmodel", "preflight", "replica", "router", "sim",
	"simulate", "tokenizer", "vllmpub"}

// dropPackagePrefixes removes "pkg: " after ": " or at the start of a
// joined error's line, for the library packages above.
func dropPackagePrefixes(q []byte) []byte {
	for _, pkg := range internalPackages {
		q = bytes.ReplaceAll(q, []byte(": "+pkg+": "), []byte(": "))
		q = bytes.ReplaceAll(q, []byte("\n  "+pkg+": "), []byte("\n  "))
	}
	return q
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: switchyard <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := commandNames()
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'switchyard <command> --help' (or 'switchyard help <command>') for the flags of one command.")
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 the command ran and failed (or could not run), 2 the command line was wrong.")
}

// commandNames lists the registered commands in order.
func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// newFlagSet returns a flag set whose --help output starts with a usage line
// and what the command does.
func newFlagSet(name, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: switchyard %s [flags]\n\n%s\n\nflags:\n", name, about)
		printFlags(fs.Output(), fs)
	}
	return fs
}

// printFlags lists fs's flags as flag.PrintDefaults does, but spelled with
// two dashes, the way the docs and error messages write them.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, help := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		help = strings.ReplaceAll(help, "\n", "\n    \t")
		if d := flagDefault(f); d != "" {
			help += " (default " + d + ")"
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, help)
	})
}

// flagDefault is f's default as help shows it: "" for a zero value, which
// says nothing, and quoted for a string.
func flagDefault(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "0s", "false", "[]", "<nil>":
		return ""
	}
	if _, isString := f.Value.(interface{ Get() any }); isString {
		if _, ok := f.Value.(interface{ Get() any }).Get().(string); ok {
			return strconv.Quote(f.DefValue)
		}
	}
	return f.DefValue
}

// parseFlags parses args into fs and maps the outcome to an exit code:
// -1 means "go on", anything else is the code to return. --help prints the
// flag set's usage on stdout (exit 0); a bad flag prints one line naming it
// and where to look (exit 2), not the whole usage.
func parseFlags(fs *flag.FlagSet, args []string, env Env) int {
	if code := parseOnly(fs, args, env); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(env, fs.Name(), fmt.Sprintf("unexpected argument %q", strings.Join(fs.Args(), " ")))
	}
	return -1
}

// parseOnly is parseFlags for commands that take plain arguments after
// their flags: it leaves fs.Args() to the caller.
func parseOnly(fs *flag.FlagSet, args []string, env Env) int {
	help := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = help
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(env.Stdout)
		help()
		return ExitOK
	}
	fs.SetOutput(env.Stderr)
	if err != nil {
		return usageError(env, fs.Name(), flagError(err))
	}
	return -1
}

// usageError prints a wrong command line's one line and the help pointer.
func usageError(env Env, name, msg string) int {
	fmt.Fprintf(env.Stderr, "switchyard %s: %s; see `switchyard %s --help`\n", name, msg, name)
	return ExitUsage
}

// flagError rewords the flag package's errors in the words the help uses:
// "flag provided but not defined: -fast" becomes "unknown flag --fast".
func flagError(err error) string {
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		return "unknown flag --" + strings.TrimLeft(f, "-")
	}
	if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		// invalid value "x" for flag -workers: parse error
		if val, after, ok := strings.Cut(rest, " for flag -"); ok {
			name, why, _ := strings.Cut(after, ": ")
			if why == "parse error" {
				why = "not a valid value"
			}
			return fmt.Sprintf("--%s %s: %s", name, val, why)
		}
	}
	if f, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
		return "--" + strings.TrimLeft(f, "-") + " needs a value"
	}
	return msg
}
