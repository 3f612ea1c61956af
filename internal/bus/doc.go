// Package bus is Switchyard's control-plane transport: NATS.
//
// It starts an embedded NATS server with JetStream (StartEmbedded) when the
// deployment has no external one, connects to a server or cluster (Connect),
// names every subject and bucket under a namespace so deployments can share
// one NATS (Subjects), keeps the worker registry in a JetStream key-value
// bucket whose entries expire when a worker stops heartbeating (Registry,
// Registration, Watcher; Join is a worker's open-and-register step;
// Registrar serves workers that may not touch JetStream), and carries load
// reports (PublishLoad, RunLoadReporter, SubscribeLoad, which takes the
// worker from the subject).
//
// Guarantees: a worker that stops refreshing its registry entry leaves every
// Watcher's routable view within the registry TTL, whether or not the server
// delivers an expiry marker, unless WatchConfig.Alive says it still serves
// (then its bus link, not the worker, is what failed). A Watcher probes the
// bus with round trips and stops expiry while the server is disconnected,
// stalled or without JetStream (fail static), recreating the registry
// bucket when it is gone. A worker whose model or block size differs from
// the frontend's is never routable; it is kept in a refused list with the
// reason, logged at error level and counted.
//
// Authentication: an embedded server started with EmbeddedConfig.Auth
// refuses anonymous clients. The frontend logs in as UserFrontend; worker id
// as WorkerUser(id) with Password(secret, user), and is held to
// WorkerPermissions: it may publish only under its own id and read replies
// only on WorkerInboxPrefix(id), and has no JetStream API (it registers
// through a frontend's Registrar; a RegistryConfig with ViaFrontend does
// that). External servers get the same permissions
// from their own configuration (the CLI's nats-config prints it); Connect
// takes the login as extra options and fails at once on a refused login.
// RedactURL hides credentials in any URL that is printed.
//
// It does not carry requests or KV blocks: those go over HTTP and kvxfer.
package bus
