package client

import (
	"errors"
	"fmt"

	"github.com/concord-io/concord/schema"
)

// Sentinel errors, one per error name on the wire. A call's error matches
// its sentinel with errors.Is and is an *Error with the server's words.
var (
	ErrInvalidRequest      = Sentinel(schema.ErrInvalidRequest)
	ErrLeaseNotFound       = Sentinel(schema.ErrLeaseNotFound)
	ErrLeaseExists         = Sentinel(schema.ErrLeaseExists)
	ErrLeaseConflict       = Sentinel(schema.ErrLeaseConflict)
	ErrIdempotencyConflict = Sentinel(schema.ErrIdempotencyConflict)
	ErrNodeNotFound        = Sentinel(schema.ErrNodeNotFound)
	ErrClusterMismatch     = Sentinel(schema.ErrClusterMismatch)
	ErrCompacted           = Sentinel(schema.ErrCompacted)
	ErrTooLarge            = Sentinel(schema.ErrTooLarge)
	ErrLimitExceeded       = Sentinel(schema.ErrLimitExceeded)
	ErrNotLeader           = Sentinel(schema.ErrNotLeader)
	ErrUnavailable         = Sentinel(schema.ErrUnavailable)
	ErrInternal            = Sentinel(schema.ErrInternal)
	// ErrDiskFull matches a grant, put or transaction the leader refused
	// because its disk is full; nothing was changed. It is not retried:
	// it lasts until an operator frees space.
	ErrDiskFull = Sentinel(schema.ErrDiskFull)
	// ErrForbidden matches a cluster request sent from a tenant's NATS
	// account: only Concord's own account may make it.
	ErrForbidden = Sentinel(schema.ErrForbidden)
	// ErrOutcomeUnknown matches the error of a write that may or may not
	// have been applied: the server said so (504 outcome_unknown), or an
	// attempt got no reply in time. Retrying it blindly could apply it
	// twice; read the state first. A call that ends with ErrUnavailable
	// changed nothing.
	ErrOutcomeUnknown = Sentinel(schema.ErrOutcomeUnknown)
	// ErrBackupNotFound matches a chunk request for a backup the leader does
	// not hold: it was read to the end, sat idle too long, or was taken by
	// an earlier leader. Start a new backup.
	ErrBackupNotFound = Sentinel(schema.ErrBackupNotFound)
)

// sentinels holds one error per row of schema.ErrorTable; Go initializes it
// before the variables above, which read it.
var sentinels = func() map[string]error {
	m := make(map[string]error, len(schema.ErrorTable))
	for _, spec := range schema.ErrorTable {
		m[spec.Name] = errors.New(spec.Name)
	}
	return m
}()

// Sentinel returns the sentinel error of an error name in schema.ErrorTable,
// the one an *Error of that name matches with errors.Is, and nil for a name
// that is not in the table.
func Sentinel(name string) error { return sentinels[name] }

// Error is an error reply from Concord.
type Error struct {
	Code        int
	Name        string
	Description string
}

func (e *Error) Error() string {
	return fmt.Sprintf("concord: %s (%d): %s", e.Name, e.Code, e.Description)
}

// Is matches the sentinel error of the same name.
func (e *Error) Is(target error) bool { return sentinels[e.Name] == target }

// Retryable reports whether the same request may be sent again: after a
// 503 at once, after a 504 with the same idempotency key (as the client's
// own retries do).
func (e *Error) Retryable() bool { return e.Code == 503 || e.Code == 504 }

func fromWire(e *schema.Error) *Error {
	return &Error{Code: e.Code, Name: e.Name, Description: e.Description}
}

// outcomeUnknown is ErrOutcomeUnknown as the client's own verdict, when
// no server said it: it reads "outcome unknown" where the sentinel reads
// its wire name.
var outcomeUnknown = outcomeUnknownError{}

type outcomeUnknownError struct{}

func (outcomeUnknownError) Error() string        { return "outcome unknown" }
func (outcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

func errorsIsLeaseNotFound(err error) bool { return errors.Is(err, ErrLeaseNotFound) }
