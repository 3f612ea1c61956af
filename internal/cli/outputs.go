package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// stdoutPath is the output file name that means standard output, as in
// --json -.
const stdoutPath = "-"

// checkOutput fails fast on an output file a run could not write at its
// end: a directory that does not exist or cannot be written to, a path
// that is a directory, or a value that is another flag (--json --url ...
// takes "--url" as the file name). "" (no output) and "-" (stdout) pass.
func checkOutput(flagName, path string) error {
	switch {
	case path == "" || path == stdoutPath:
		return nil
	case strings.HasPrefix(path, "-"):
		return fmt.Errorf("%s %q: want a file name, or - for stdout (the next flag was taken as the file)", flagName, path)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("%s %s: is a directory; want a file name", flagName, path)
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return fmt.Errorf("%s %s: directory %s does not exist", flagName, path, dir)
	}
	f, err := os.CreateTemp(dir, ".switchyard-check-*")
	if err != nil {
		return fmt.Errorf("%s %s: cannot write in %s: %w", flagName, path, dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// writeOutput writes one output through write, which takes a file path (the
// libraries write files): to path, or for "-" through a temporary file to
// stdout, so the same writer serves both.
func writeOutput(path string, stdout io.Writer, write func(path string) error) error {
	if path != stdoutPath {
		return write(path)
	}
	f, err := os.CreateTemp("", "switchyard-out-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	if err := write(name); err != nil {
		return err
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	_, err = stdout.Write(b)
	return err
}

// wrote says where an output went, on stderr; nothing for stdout.
func wrote(stderr io.Writer, cmd, path string) {
	if path != stdoutPath {
		fmt.Fprintf(stderr, "%s: wrote %s\n", cmd, path)
	}
}

// frontendURL accepts the client base URL an OpenAI SDK takes
// (http://host:8000/v1) where a command wants the frontend's root: the
// commands add /v1, /admin and /health themselves. Several URLs may be
// separated by commas.
func frontendURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimRight(strings.TrimSpace(p), "/")
		parts[i] = strings.TrimRight(strings.TrimSuffix(p, "/v1"), "/")
	}
	return strings.Join(parts, ",")
}

// keysFromEnv fills the API and admin keys a flag did not give from the
// environment (getenv is os.Getenv outside tests), as the frontend reads
// them, so a client and the frontend it tests can share the variables.
func keysFromEnv(apiKey, adminKey *string, getenv func(string) string) {
	if apiKey != nil && *apiKey == "" {
		*apiKey = getenv(envAPIKey)
	}
	if adminKey != nil && *adminKey == "" {
		*adminKey = getenv(envAdminKey)
	}
}
