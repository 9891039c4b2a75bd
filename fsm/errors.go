package fsm

import (
	"errors"
	"fmt"
)

// Sentinel errors for state-dependent failures. Apply wraps them with the
// details; callers test them with errors.Is and map them to wire codes.
var (
	// ErrLeaseNotFound: the lease does not exist, or is anonymous where an
	// explicit lease is required.
	ErrLeaseNotFound = errors.New("lease not found")
	// ErrLeaseExists: a grant requested an id that is taken.
	ErrLeaseExists = errors.New("lease exists")
	// ErrLeaseConflict: the key is attached to a different lease.
	ErrLeaseConflict = errors.New("lease conflict")
	// ErrLimitExceeded: a count limit would be exceeded.
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrTooLarge: a transaction's prefix delete matches more keys than its
	// limit.
	ErrTooLarge = errors.New("too large")
	// ErrIdempotencyConflict: an idempotency key was reused for a different
	// request.
	ErrIdempotencyConflict = errors.New("idempotency conflict")
	// ErrCompacted: a change-log read starts below the compaction floor.
	ErrCompacted = errors.New("compacted")
	// ErrBadCommand: the log entry cannot be decoded. It means a bug or a
	// version mismatch between replicas, never bad user input.
	ErrBadCommand = errors.New("bad command")
)

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
