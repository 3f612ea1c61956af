package cli

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/switchyard-llm/switchyard/internal/bus"
)

// Environment variables for NATS credentials, so they stay out of the
// process list.
const (
	envNATSUser     = "SWITCHYARD_NATS_USER"
	envNATSPassword = "SWITCHYARD_NATS_PASSWORD"
	envNATSSecret   = "SWITCHYARD_NATS_SECRET"
)

// natsAuthFlags are the credentials and TLS settings a process uses to log
// in to NATS, and, for an embedded server, whether and how it requires
// logins.
type natsAuthFlags struct {
	user, passwordFile string
	credsFile, nkey    string
	caFile             string
	certFile, keyFile  string

	// embedded server only
	auth                    bool
	secretFile              string
	tlsCertFile, tlsKeyFile string
}

func (a *natsAuthFlags) add(fs *flag.FlagSet, embedded bool) {
	fs.StringVar(&a.user, "nats-user", "", "NATS user name (default: $"+envNATSUser+"; a worker with a password defaults to worker:<id>)")
	fs.StringVar(&a.passwordFile, "nats-password-file", "", "file holding the NATS password (default: $"+envNATSPassword+"); never put it in --nats")
	fs.StringVar(&a.credsFile, "nats-creds", "", "NATS credentials file (JWT and nkey seed, as nsc writes it)")
	fs.StringVar(&a.nkey, "nats-nkey", "", "file holding a NATS nkey seed (SU...)")
	fs.StringVar(&a.caFile, "nats-ca", "", "PEM CA to verify the NATS server's TLS certificate (turns on TLS)")
	fs.StringVar(&a.certFile, "nats-cert", "", "PEM client certificate for NATS TLS")
	fs.StringVar(&a.keyFile, "nats-key", "", "PEM key of --nats-cert")
	if embedded {
		fs.BoolVar(&a.auth, "nats-auth", true, "the embedded NATS server requires logins, and workers may publish only under their own id (false: anyone who reaches it can join)")
		fs.StringVar(&a.tlsCertFile, "nats-tls-cert", "", "embedded NATS: PEM certificate to serve TLS with (clients verify it with --nats-ca)")
		fs.StringVar(&a.tlsKeyFile, "nats-tls-key", "", "embedded NATS: PEM key of --nats-tls-cert")
		fs.StringVar(&a.secretFile, "nats-secret-file", "", "embedded NATS: file holding the deployment secret that worker passwords derive from (default: $"+envNATSSecret+", else a new one written to a 0600 file)")
	}
}

// options builds the login and TLS options. defaultUser is the user to log
// in as when a password is given without one ("" means none); inbox, when
// set, is the connection's reply prefix (a worker's permissions allow only
// its own).
func (a *natsAuthFlags) options(getenv func(string) string, defaultUser, inbox string) ([]nats.Option, error) {
	var opts []nats.Option
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	user := a.user
	if user == "" {
		user = getenv(envNATSUser)
	}
	password := getenv(envNATSPassword)
	if a.passwordFile != "" {
		b, err := os.ReadFile(a.passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-password-file: %w", err)
		}
		password = strings.TrimSpace(string(b))
	}
	logins := 0
	if password != "" {
		if user == "" {
			user = defaultUser
		}
		if user == "" {
			return nil, errors.New("a NATS password needs a user: set --nats-user or $" + envNATSUser)
		}
		opts = append(opts, nats.UserInfo(user, password))
		logins++
	} else if user != "" {
		return nil, fmt.Errorf("NATS user %q has no password: set --nats-password-file or $%s", user, envNATSPassword)
	}
	if a.credsFile != "" {
		if _, err := os.Stat(a.credsFile); err != nil {
			return nil, fmt.Errorf("--nats-creds: %w", err)
		}
		opts = append(opts, nats.UserCredentials(a.credsFile))
		logins++
	}
	if a.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(a.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey %s: %w", a.nkey, err)
		}
		opts = append(opts, o)
		logins++
	}
	if logins > 1 {
		return nil, errors.New("give one NATS login: a password, --nats-creds or --nats-nkey")
	}
	if a.caFile != "" {
		opts = append(opts, nats.RootCAs(a.caFile))
	}
	if (a.certFile == "") != (a.keyFile == "") {
		return nil, errors.New("--nats-cert and --nats-key go together")
	}
	if a.certFile != "" {
		opts = append(opts, nats.ClientCert(a.certFile, a.keyFile))
	}
	return opts, nil
}

// hasLogin reports whether the flags or environment name a login of their
// own, which an embedded server's generated one must not silently replace.
func (a *natsAuthFlags) hasLogin(getenv func(string) string) bool {
	return a.user != "" || a.passwordFile != "" || a.credsFile != "" || a.nkey != "" ||
		getenv(envNATSUser) != "" || getenv(envNATSPassword) != ""
}

// secret returns the embedded server's deployment secret: from
// --nats-secret-file, else $SWITCHYARD_NATS_SECRET, else a new random one.
// A new one is written to a 0600 file in dir so workers can be given their
// passwords (switchyard nats-password); path is that file, or "".
func (a *natsAuthFlags) secret(getenv func(string) string, dir, name string) (secret []byte, path string, err error) {
	switch {
	case a.secretFile != "":
		b, err := os.ReadFile(a.secretFile)
		if err != nil {
			return nil, "", fmt.Errorf("--nats-secret-file: %w", err)
		}
		secret = []byte(strings.TrimSpace(string(b)))
	case getenv(envNATSSecret) != "":
		secret = []byte(getenv(envNATSSecret))
	default:
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			return nil, "", fmt.Errorf("generate a NATS secret: %w", err)
		}
		secret = []byte(hex.EncodeToString(raw))
		if dir != "" {
			f, err := os.CreateTemp(dir, name+"-*.secret")
			if err != nil {
				return nil, "", fmt.Errorf("write the NATS secret: %w", err)
			}
			defer f.Close()
			if err := f.Chmod(0o600); err != nil {
				return nil, "", fmt.Errorf("write the NATS secret: %w", err)
			}
			if _, err := f.Write(append(secret, '\n')); err != nil {
				return nil, "", fmt.Errorf("write the NATS secret: %w", err)
			}
			path, _ = filepath.Abs(f.Name())
		}
	}
	if len(secret) < bus.MinSecretLen {
		return nil, "", fmt.Errorf("the NATS secret is %d bytes: want at least %d", len(secret), bus.MinSecretLen)
	}
	return secret, path, nil
}
