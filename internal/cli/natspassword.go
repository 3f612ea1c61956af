package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

func init() {
	register(command{name: "nats-password", summary: "print a worker's NATS password for a frontend's embedded server", run: runNATSPassword})
}

// runNATSPassword derives one bus user's password from the deployment
// secret, so an operator can hand each worker its own password and nothing
// that would let it log in as another.
func runNATSPassword(_ context.Context, args []string, env Env) int {
	var secretFile, id string
	var frontend bool
	fs := newFlagSet("nats-password", "Prints the NATS password of one worker (or of the frontend) for a frontend's embedded server,\nderived from the deployment secret. Give each worker only its own: with it, the server lets it\npublish under its own id and nothing else. The user name is worker:<id>.")
	fs.StringVar(&secretFile, "secret-file", "", "file holding the deployment secret (the frontend's --nats-secret-file; default: $"+envNATSSecret+")")
	fs.StringVar(&id, "id", "", "worker id")
	fs.BoolVar(&frontend, "frontend", false, "print the frontend's password instead (user "+bus.UserFrontend+")")
	if code := parseFlags(fs, args, env); code >= 0 {
		return code
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(env.Stderr, "switchyard nats-password: "+format+"\n", a...)
		return ExitUsage
	}
	if (id == "") == !frontend {
		return bad("give --id ID or --frontend")
	}
	var secret string
	switch {
	case secretFile != "":
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return bad("--secret-file: %v", err)
		}
		secret = strings.TrimSpace(string(b))
	case os.Getenv(envNATSSecret) != "":
		secret = os.Getenv(envNATSSecret)
	default:
		return bad("no secret: give --secret-file (the frontend prints where its generated secret is) or set $%s", envNATSSecret)
	}
	if len(secret) < bus.MinSecretLen {
		return bad("the secret is %d bytes: want at least %d", len(secret), bus.MinSecretLen)
	}
	user := bus.UserFrontend
	if !frontend {
		if err := bus.ValidateName("worker id", id); err != nil {
			return bad("--id: %v", err)
		}
		user = bus.WorkerUser(id)
	}
	fmt.Fprintln(env.Stdout, bus.Password([]byte(secret), user))
	return ExitOK
}
