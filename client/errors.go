package client

import (
	"errors"
	"fmt"

	"github.com/concord-io/concord/schema"
)

// Sentinel errors, one per error name on the wire. A call's error matches
// its sentinel with errors.Is and is an *Error with the server's words.
var (
	ErrInvalidRequest      = errors.New(schema.ErrInvalidRequest)
	ErrLeaseNotFound       = errors.New(schema.ErrLeaseNotFound)
	ErrLeaseExists         = errors.New(schema.ErrLeaseExists)
	ErrLeaseConflict       = errors.New(schema.ErrLeaseConflict)
	ErrIdempotencyConflict = errors.New(schema.ErrIdempotencyConflict)
	ErrNodeNotFound        = errors.New(schema.ErrNodeNotFound)
	ErrClusterMismatch     = errors.New(schema.ErrClusterMismatch)
	ErrCompacted           = errors.New(schema.ErrCompacted)
	ErrTooLarge            = errors.New(schema.ErrTooLarge)
	ErrLimitExceeded       = errors.New(schema.ErrLimitExceeded)
	ErrNotLeader           = errors.New(schema.ErrNotLeader)
	ErrUnavailable         = errors.New(schema.ErrUnavailable)
	ErrInternal            = errors.New(schema.ErrInternal)
)

var sentinels = map[string]error{}

func init() {
	for _, e := range []error{ErrInvalidRequest, ErrLeaseNotFound, ErrLeaseExists, ErrLeaseConflict, ErrIdempotencyConflict,
		ErrNodeNotFound, ErrClusterMismatch, ErrCompacted, ErrTooLarge, ErrLimitExceeded, ErrNotLeader, ErrUnavailable, ErrInternal} {
		sentinels[e.Error()] = e
	}
}

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

// Retryable reports whether the same request may be sent again.
func (e *Error) Retryable() bool { return e.Code == 503 }

func fromWire(e *schema.Error) *Error {
	return &Error{Code: e.Code, Name: e.Name, Description: e.Description}
}

func errorsIsLeaseNotFound(err error) bool { return errors.Is(err, ErrLeaseNotFound) }

func isCompacted(err error) bool { return errors.Is(err, ErrCompacted) }
