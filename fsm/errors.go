package fsm

import (
	"errors"
	"fmt"

	"github.com/concord-io/concord/schema"
)

// Sentinel errors for state-dependent failures. Apply wraps them with the
// details; callers test them with errors.Is. Each names the error reply it
// becomes (WireName), so the service maps them without a list of its own.
var (
	// ErrLeaseNotFound: the lease does not exist, or is anonymous where an
	// explicit lease is required.
	ErrLeaseNotFound = newSentinel("lease not found", schema.ErrLeaseNotFound)
	// ErrLeaseExists: a grant requested an id that is taken.
	ErrLeaseExists = newSentinel("lease exists", schema.ErrLeaseExists)
	// ErrLeaseConflict: the key is attached to a different lease.
	ErrLeaseConflict = newSentinel("lease conflict", schema.ErrLeaseConflict)
	// ErrLimitExceeded: a count limit would be exceeded.
	ErrLimitExceeded = newSentinel("limit exceeded", schema.ErrLimitExceeded)
	// ErrTooLarge: a transaction's prefix delete matches more keys than its
	// limit.
	ErrTooLarge = newSentinel("too large", schema.ErrTooLarge)
	// ErrIdempotencyConflict: an idempotency key was reused for a different
	// request.
	ErrIdempotencyConflict = newSentinel("idempotency conflict", schema.ErrIdempotencyConflict)
	// ErrCompacted: a read of the change log or of a past revision starts
	// below the compaction floor.
	ErrCompacted = newSentinel("compacted", schema.ErrCompacted)
	// ErrFutureRevision: a read names a revision not yet written.
	ErrFutureRevision = newSentinel("future revision", schema.ErrInvalidRequest)
	// ErrBadCommand: the log entry cannot be decoded. It means a bug or a
	// version mismatch between replicas, never bad user input: internal.
	ErrBadCommand = newSentinel("bad command", schema.ErrInternal)
	// ErrBadSnapshot reports a snapshot that cannot be restored. It never
	// answers a request; were it to, it would be a server fault: internal.
	ErrBadSnapshot = newSentinel("bad snapshot", schema.ErrInternal)
)

// sentinel is an error condition callers test for with errors.Is; wire is
// the name of the error reply it becomes.
type sentinel struct {
	msg  string
	wire string
}

func (e *sentinel) Error() string { return e.msg }

// newSentinel refuses, when the package loads, a wire name that is not in
// schema.ErrorTable.
func newSentinel(msg, wire string) error {
	if _, ok := schema.LookupError(wire); !ok {
		panic(fmt.Sprintf("fsm: error %q names %q, which is not in schema.ErrorTable", msg, wire))
	}
	return &sentinel{msg: msg, wire: wire}
}

// WireName returns the name of the error reply (a row of schema.ErrorTable)
// for an error that wraps one of this package's sentinels, and false for any
// other error.
func WireName(err error) (string, bool) {
	var s *sentinel
	if errors.As(err, &s) {
		return s.wire, true
	}
	return "", false
}

// stateError carries a sentinel for errors.Is and a message that reads well
// on its own, because the service puts it on the wire as the description.
type stateError struct {
	kind error
	msg  string
}

func (e *stateError) Error() string { return e.msg }
func (e *stateError) Unwrap() error { return e.kind }

func errf(kind error, format string, args ...any) error {
	return &stateError{kind: kind, msg: fmt.Sprintf(format, args...)}
}
