package bus

import (
	"fmt"
)

// DefaultNamespace is the namespace used when none is configured.
const DefaultNamespace = "default"

// Subjects names every NATS subject and bucket of one deployment. Two
// deployments with different namespaces can share one NATS without seeing
// each other's traffic. The zero value uses DefaultNamespace.
type Subjects struct {
	Namespace string
}

// NewSubjects validates ns and returns its Subjects; "" means DefaultNamespace.
func NewSubjects(ns string) (Subjects, error) {
	if ns == "" {
		ns = DefaultNamespace
	}
	if err := ValidateName("namespace", ns); err != nil {
		return Subjects{}, err
	}
	return Subjects{Namespace: ns}, nil
}

func (s Subjects) ns() string {
	if s.Namespace == "" {
		return DefaultNamespace
	}
	return s.Namespace
}

// KVEvents is the subject worker publishes its KV event batches on.
func (s Subjects) KVEvents(worker string) string { return "sy." + s.ns() + ".kv." + worker }

// KVEventsAll matches every worker's KV event subject.
func (s Subjects) KVEventsAll() string { return "sy." + s.ns() + ".kv.*" }

// KVEventsPrefix is KVEvents without the worker: the worker ID is the rest
// of the subject.
func (s Subjects) KVEventsPrefix() string { return "sy." + s.ns() + ".kv." }

// Snapshot is the subject a worker answers KV snapshot requests on.
func (s Subjects) Snapshot(worker string) string { return "sy." + s.ns() + ".snap." + worker }

// Load is the subject a worker publishes its load reports on.
func (s Subjects) Load(worker string) string { return "sy." + s.ns() + ".load." + worker }

// LoadPrefix is Load without the worker: the worker ID is the rest of the
// subject.
func (s Subjects) LoadPrefix() string { return "sy." + s.ns() + ".load." }

// LoadAll matches every worker's load subject.
func (s Subjects) LoadAll() string { return "sy." + s.ns() + ".load.*" }

// Transfers is where decode worker reports each completed KV pull, so
// frontends can keep their link estimates current.
func (s Subjects) Transfers(worker string) string { return "sy." + s.ns() + ".xfer." + worker }

// TransfersAll matches every worker's transfer subject.
func (s Subjects) TransfersAll() string { return "sy." + s.ns() + ".xfer.*" }

// TransfersPrefix is Transfers without the worker: the worker ID is the
// rest of the subject.
func (s Subjects) TransfersPrefix() string { return "sy." + s.ns() + ".xfer." }

// Registrar is where worker sends its registry requests (see Registrar).
func (s Subjects) Registrar(worker string) string { return "sy." + s.ns() + ".reg." + worker }

// RegistrarAll matches every worker's registrar subject.
func (s Subjects) RegistrarAll() string { return "sy." + s.ns() + ".reg.*" }

// RegistrarPrefix is Registrar without the worker.
func (s Subjects) RegistrarPrefix() string { return "sy." + s.ns() + ".reg." }

// Replicas is where frontend replicas share their routing state: in-flight
// requests, approximate-index decisions, link probes and admin settings.
func (s Subjects) Replicas() string { return "sy." + s.ns() + ".fe" }

// SettingsBucket is the JetStream key-value bucket of the settings
// frontends share (changed through /admin).
func (s Subjects) SettingsBucket() string { return "sy_" + s.ns() + "_settings" }

// WorkersBucket is the JetStream key-value bucket of the worker registry.
func (s Subjects) WorkersBucket() string { return "sy_" + s.ns() + "_workers" }

// ValidateName checks that name is usable as a namespace or worker ID: it
// ends up as a NATS subject token, a key-value key and part of a bucket name,
// so only ASCII letters, digits, '-' and '_' are allowed, at most 64 of them.
// what names the value in the error ("namespace", "worker id").
func ValidateName(what, name string) error {
	if name == "" {
		return fmt.Errorf("bus: %s is empty", what)
	}
	if len(name) > 64 {
		return fmt.Errorf("bus: %s %q is longer than 64 characters", what, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
		if !ok {
			return fmt.Errorf("bus: %s %q has character %q: use only letters, digits, '-' and '_'", what, name, c)
		}
	}
	return nil
}
