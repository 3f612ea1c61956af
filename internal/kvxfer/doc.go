// Package kvxfer moves KV-cache blocks from a prefill worker to a decode
// worker over TCP (optionally TLS, mutual when a CA is configured).
//
// The prefill worker runs a Server. After a prefill it pins the blocks and
// calls Server.Lease, which returns a single-use token; the decode worker
// Dials the server and Pulls the blocks by that token. A lease is released
// (its release func called exactly once) after the pull that claims it ends,
// when it expires unclaimed (ServerConfig.LeaseTTL, default 30 s, vLLM's
// kv_lease_duration default), or when the server closes. A pull with an
// unknown, expired or already-claimed lease is refused with an error frame,
// which the client turns into a *RemoteError matching ErrLeaseUnknown,
// ErrLeaseExpired or ErrLeaseUsed (and ErrRefused). A claimed lease is spent
// even when its pull fails: the caller then recomputes the prefill, as vLLM's
// connector does on a failed load.
//
// # Wire format
//
// Every frame is a 1-byte type, a 4-byte big-endian payload length and the
// payload. The client sends one request frame (PullRequest, ProbeRequest or
// Ping) and reads the answer to completion before the next request. A pull is
// answered, per requested block in the requested order, by BlockStart
// (index, hash, size), one or more Data frames of at most the server's chunk
// size, and BlockEnd carrying the CRC32C (Castagnoli) of the block's payload;
// then Done (block count, byte count). Any refusal is a single Error frame
// (code, message), after which the server closes the connection.
//
// # Integrity
//
// The client checks each block twice as it streams: the CRC32C accumulated
// over the received bytes must equal BlockEnd's, and every Data frame must
// equal kvpayload.Fill of the block's hash at its offset (a block's bytes are
// a pure function of its hash). The callback for a block runs only after both
// pass, so a caller never inserts a block that was not fully verified. A
// mismatch fails the pull with ErrCorrupt, a stream that ends early with
// ErrTruncated; nothing partial is ever delivered as good.
//
// # Resources
//
// Each connection holds at most one chunk buffer on each side, so memory is
// bounded by ChunkSize per connection whatever the transfer size. Every read
// and write has a deadline (IOTimeout), and a Pull's context cancels it
// promptly. A server connection idle for IOTimeout is closed, and a request
// frame must arrive whole within IOTimeout.
//
// The server never buffers what it has not authenticated. A PullRequest
// carries its lease token before its block list; the server reads the
// header, the token and the count, refuses an unknown, expired or used
// lease right there, and reads the block list only when it holds no more
// hashes than the lease does and fits the server-wide MaxRequestMemory
// (else CodeBusy). A probe has no lease: with ServerConfig.ProbeKey set,
// it is refused (CodeUnauthorized) unless the connection sent that key in
// an Auth frame first (ClientConfig.ProbeKey does). Control frames over
// 4 KiB are refused unread. The
// chunk buffer is allocated only when a request is accepted. A connection
// takes one of the MaxConns slots only once it authenticates (a live lease
// in its pull, or the probe key); until then it is one of MaxUnauthConns
// (16), shared by pings and unkeyed probes, where a newcomer evicts the
// longest idle one that had its chance (sent a request, or half a second
// passed): pings cannot crowd out pulls. Refusals are counted by
// ConnsRefused, evictions by ConnsEvicted. With a CA configured, mutual TLS
// authenticates the peer before any frame is read.
//
// A Client is safe for concurrent use; its calls are serialised on its one
// connection. A Server is safe for concurrent use.
package kvxfer
