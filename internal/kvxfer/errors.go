package kvxfer

import (
	"errors"
	"fmt"
)

// Code is the reason carried by an Error frame.
type Code uint16

// Error frame codes.
const (
	CodeLeaseUnknown Code = 1 // no such lease, or forgotten long ago
	CodeLeaseExpired Code = 2 // the lease's TTL passed before the pull
	CodeLeaseUsed    Code = 3 // the lease was already claimed by a pull
	CodeBadRequest   Code = 4 // malformed request, block size mismatch, hash not leased
	CodeUnavailable  Code = 5 // the server is shutting down
	CodeBusy         Code = 6 // the server's request memory budget is spent; retry later
	CodeUnauthorized Code = 7 // a probe without the server's probe key
)

func (c Code) String() string {
	switch c {
	case CodeLeaseUnknown:
		return "lease_unknown"
	case CodeLeaseExpired:
		return "lease_expired"
	case CodeLeaseUsed:
		return "lease_used"
	case CodeBadRequest:
		return "bad_request"
	case CodeUnavailable:
		return "unavailable"
	case CodeBusy:
		return "busy"
	case CodeUnauthorized:
		return "unauthorized"
	}
	return fmt.Sprintf("code_%d", uint16(c))
}

// Errors a caller can test for with errors.Is.
var (
	// ErrRefused matches every refusal by the server (any *RemoteError).
	ErrRefused      = errors.New("kvxfer: refused by server")
	ErrLeaseUnknown = errors.New("kvxfer: lease unknown")
	ErrLeaseExpired = errors.New("kvxfer: lease expired")
	ErrLeaseUsed    = errors.New("kvxfer: lease already used")
	// ErrCorrupt means received bytes failed a check: a block's CRC32C or
	// payload did not match, or the stream broke the protocol.
	ErrCorrupt = errors.New("kvxfer: corrupt stream")
	// ErrTruncated means the stream ended before the answer was complete.
	ErrTruncated = errors.New("kvxfer: truncated stream")
)

// RemoteError is a refusal the server sent in an Error frame.
type RemoteError struct {
	Code Code
	Msg  string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("kvxfer: server refused (%s): %s", e.Code, e.Msg)
}

// Is makes errors.Is(err, ErrLeaseExpired) and friends work.
func (e *RemoteError) Is(target error) bool {
	switch target {
	case ErrRefused:
		return true
	case ErrLeaseUnknown:
		return e.Code == CodeLeaseUnknown
	case ErrLeaseExpired:
		return e.Code == CodeLeaseExpired
	case ErrLeaseUsed:
		return e.Code == CodeLeaseUsed
	}
	return false
}
