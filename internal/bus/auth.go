package bus

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// Bus users. The frontend is the control plane and may do anything; a
// worker is "worker:<id>" and may publish only under its own id.
const (
	UserFrontend     = "frontend"
	workerUserPrefix = "worker:"
)

// MinSecretLen is the shortest deployment secret accepted: 128 bits.
const MinSecretLen = 16

// WorkerUser is the bus user name of worker id.
func WorkerUser(id string) string { return workerUserPrefix + id }

// Password derives user's password from the deployment secret:
// hex(HMAC-SHA256(secret, user)). The embedded server checks it the same
// way, so it stores no password, and a worker handed its own password
// learns nothing about any other's.
func Password(secret []byte, user string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(user))
	return hex.EncodeToString(m.Sum(nil))
}

// WorkerInboxPrefix is the reply-subject prefix a worker's connection must
// use (nats.CustomInboxPrefix): its permissions let it subscribe to its own
// inboxes only, so it cannot read replies meant for others.
func WorkerInboxPrefix(id string) string { return "_INBOX_" + id }

// WorkerPermissions is what worker id may do in subj's deployment: publish
// its own KV events, load and transfer reports; send registry requests on
// its own registrar subject (a frontend's Registrar does the JetStream
// work); answer snapshot requests sent to it; and read replies on its own
// inboxes. Nothing else: no JetStream API at all, since JetStream answers on
// whatever reply subject a request names and its streams store whatever
// lands on their subjects (see registrar.go), so any API a worker could
// call would let it publish, through the server, where it may not.
func WorkerPermissions(subj Subjects, id string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			subj.KVEvents(id), subj.Load(id), subj.Transfers(id), subj.Registrar(id),
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			subj.Snapshot(id),
			WorkerInboxPrefix(id) + ".>",
		}},
		// Snapshot replies go to the requester's inbox. Only frontends
		// can send a worker a message with a reply subject: every subject
		// a worker receives on is its own, and nothing it can publish to
		// answers it with one.
		Response: &server.ResponsePermission{MaxMsgs: 1},
	}
}

// EmbeddedAuth turns on authentication in an embedded server: every client
// must log in as UserFrontend or WorkerUser(id) with the password Password
// derives from Secret, and workers get WorkerPermissions in Subjects'
// namespace.
type EmbeddedAuth struct {
	Secret   []byte
	Subjects Subjects
}

func (a *EmbeddedAuth) validate() error {
	if len(a.Secret) < MinSecretLen {
		return fmt.Errorf("bus: nats secret of %d bytes: want at least %d", len(a.Secret), MinSecretLen)
	}
	return ValidateName("namespace", a.Subjects.ns())
}

// authenticator checks clients of an embedded server.
type authenticator struct{ auth EmbeddedAuth }

// Check implements server.Authentication.
func (a authenticator) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	o := c.GetOpts()
	if o == nil || o.Username == "" {
		return false
	}
	var perms *server.Permissions // the frontend: everything
	if id, ok := strings.CutPrefix(o.Username, workerUserPrefix); ok {
		if ValidateName("worker id", id) != nil {
			return false
		}
		perms = WorkerPermissions(a.auth.Subjects, id)
	} else if o.Username != UserFrontend {
		return false
	}
	want := Password(a.auth.Secret, o.Username)
	if subtle.ConstantTimeCompare([]byte(o.Password), []byte(want)) != 1 {
		return false
	}
	c.RegisterUser(&server.User{Username: o.Username, Permissions: perms})
	return true
}

// RedactURL hides passwords and tokens in a NATS URL (or a comma-separated
// list of them) so it can be printed or logged: "nats://u:p@h" becomes
// "nats://u:xxxxx@h", and "nats://token@h" becomes "nats://xxxxx@h".
func RedactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		u, err := url.Parse(p)
		if err != nil || u.User == nil {
			if err != nil && strings.Contains(p, "@") {
				parts[i] = "xxxxx@" + p[strings.LastIndex(p, "@")+1:]
			}
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// ErrNoSecret is returned where a secret is needed and none was given.
var ErrNoSecret = errors.New("bus: no nats secret")
