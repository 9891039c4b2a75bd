package schema

import "fmt"

// Error names on the wire. Clients test the name; the code is the HTTP-like
// class it belongs to.
const (
	ErrInvalidRequest = "invalid_request"
	ErrLeaseNotFound  = "lease_not_found"
	ErrLeaseExists    = "lease_exists"
	ErrLeaseConflict  = "lease_conflict"
	// ErrNodeNotFound: a cluster request named a node that is not a member.
	ErrNodeNotFound = "node_not_found"
	// ErrClusterMismatch: a node of one cluster asked to join another, or
	// a node whose release cannot read the cluster's log asked to join.
	ErrClusterMismatch = "cluster_mismatch"
	// ErrBackupNotFound: a chunk request named a backup the leader does not
	// hold (never made, finished, expired, or made by an earlier leader);
	// the client starts a new backup.
	ErrBackupNotFound = "backup_not_found"
	// ErrIdempotencyConflict: an idempotency key reused for another request.
	ErrIdempotencyConflict = "idempotency_conflict"
	ErrCompacted           = "compacted"
	ErrTooLarge            = "too_large"
	ErrLimitExceeded       = "limit_exceeded"
	ErrNotLeader           = "not_leader"
	ErrUnavailable         = "unavailable"
	// ErrOutcomeUnknown: the request may or may not have been applied (its
	// leader lost leadership or shut down while it was in the log, or a
	// node answered that cannot tell whether another node starts it). A
	// retry with the same idempotency key is safe; without one, read first.
	ErrOutcomeUnknown = "outcome_unknown"
	// ErrDiskFull: the leader's disk has no room for more of its log; it
	// takes no new state (grants, puts, transactions) until space is freed,
	// and changed nothing.
	ErrDiskFull = "disk_full"
	// ErrForbidden: a tenant (a request from another NATS account) called
	// an endpoint that acts on the whole cluster.
	ErrForbidden = "forbidden"
	ErrInternal  = "internal"
)

// ErrorClass is what a caller can do about an error, coarser than its name.
// The CLI chooses its exit code by class, so a new error name chooses its
// exit code by choosing its class here.
type ErrorClass int

const (
	// ClassFailed: anything not below; the request cannot succeed as sent,
	// or the server failed.
	ClassFailed ErrorClass = iota
	// ClassNotFound: the lease or node the request names does not exist.
	ClassNotFound
	// ClassConflict: the request conflicts with the state, such as an id
	// that is taken.
	ClassConflict
	// ClassUnavailable: no leader can serve the request now, and nothing
	// was changed: the same request may be sent again. Exactly the 503s.
	ClassUnavailable
	// ClassCompacted: the change log no longer holds the revision asked for.
	ClassCompacted
	// ClassOutcomeUnknown: a write that may or may not have been applied.
	// The same request may be sent again with the same idempotency key;
	// without one, the caller reads the state first. Exactly the 504s.
	ClassOutcomeUnknown
)

// ErrorSpec is one row of the error table.
type ErrorSpec struct {
	Name string
	Code int
	// Class decides the CLI's exit code. It follows the code except where a
	// script should not treat the error like the others of its code:
	// cluster_mismatch and backup_not_found are ClassFailed.
	Class ErrorClass
	// Meaning is a one-line explanation for documentation.
	Meaning string
}

// Retryable says a client may send the same request again: at once after
// a 503, and after a 504 with the same idempotency key.
func (s ErrorSpec) Retryable() bool {
	return s.Class == ClassUnavailable || s.Class == ClassOutcomeUnknown
}

// ErrorTable lists every error a Concord endpoint can reply with. It is the
// one list of error names: the client's sentinels, the wire names of the
// state machine's errors and the CLI's exit codes all refer to its rows.
var ErrorTable = []ErrorSpec{
	{ErrInvalidRequest, 400, ClassFailed, "the request is malformed; the description names the field"},
	{ErrLeaseNotFound, 404, ClassNotFound, "the lease does not exist (never granted, expired or revoked)"},
	{ErrLeaseExists, 409, ClassConflict, "a grant asked for an id that is taken"},
	{ErrNodeNotFound, 404, ClassNotFound, "the node is not a member of the cluster"},
	{ErrClusterMismatch, 409, ClassFailed, "the node belongs to another cluster, or runs a release that cannot read its log"},
	{ErrBackupNotFound, 404, ClassFailed, "the leader holds no backup of that id (finished, expired, or taken by an earlier leader)"},
	{ErrLeaseConflict, 409, ClassConflict, "the key is attached to a different lease"},
	{ErrIdempotencyConflict, 409, ClassConflict, "the idempotency key was used for a different request"},
	{ErrCompacted, 410, ClassCompacted, "the requested revision is below the compaction floor"},
	{ErrTooLarge, 413, ClassFailed, "a value, metadata or request exceeds its size limit"},
	{ErrLimitExceeded, 429, ClassFailed, "a count limit (leases, keys per lease) would be exceeded"},
	{ErrNotLeader, 503, ClassUnavailable, "this node is not the leader; retry"},
	{ErrUnavailable, 503, ClassUnavailable, "the cluster cannot serve the request now, and nothing was changed; retry"},
	{ErrOutcomeUnknown, 504, ClassOutcomeUnknown, "the write may or may not have been applied; retry with the same idempotency key, or read before retrying"},
	{ErrDiskFull, 507, ClassFailed, "the leader's disk is full: it takes no new leases, puts or transactions until space is freed (keep-alives, revokes and deletes still work); nothing was changed"},
	{ErrForbidden, 403, ClassFailed, "a tenant's account called an endpoint that only Concord's own account may call (the cluster endpoints); nothing was changed"},
	{ErrInternal, 500, ClassFailed, "an unexpected server error"},
}

var errorsByName = func() map[string]ErrorSpec {
	m := make(map[string]ErrorSpec, len(ErrorTable))
	for _, e := range ErrorTable {
		m[e.Name] = e
	}
	return m
}()

// LookupError returns the table's row for an error name, and false for a
// name that is not in the table.
func LookupError(name string) (ErrorSpec, bool) {
	spec, ok := errorsByName[name]
	return spec, ok
}

// Error is an error reply. It travels as the body
// {"error":{"code":404,"name":"lease_not_found","description":"..."}}
// and in the headers Nats-Service-Error-Code and Nats-Service-Error.
type Error struct {
	Code        int    `json:"code"`
	Name        string `json:"name"`
	Description string `json:"description"`
}

// ErrorReply is the body of an error reply.
type ErrorReply struct {
	Error *Error `json:"error"`
}

// Errorf builds an Error whose code comes from the table.
func Errorf(name, format string, args ...any) *Error {
	spec, ok := errorsByName[name]
	if !ok {
		spec = errorsByName[ErrInternal]
	}
	return &Error{Code: spec.Code, Name: spec.Name, Description: fmt.Sprintf(format, args...)}
}

// Error implements error.
func (e *Error) Error() string { return fmt.Sprintf("%s (%d): %s", e.Name, e.Code, e.Description) }

// Retryable reports whether the same request may be sent again (after a
// 504, with the same idempotency key).
func (e *Error) Retryable() bool { return e.Code == 503 || e.Code == 504 }

// StandbyPhrase is in the description of every answer a node gives while it
// cannot serve (its standby): "node n3 cannot serve requests yet: waiting
// for a leader; ...". A client that keeps getting it from one server moves
// to another of its pool.
const StandbyPhrase = "cannot serve requests yet"

// Micro error headers, as the nats.go micro framework sets them.
const (
	HeaderErrorCode = "Nats-Service-Error-Code"
	HeaderError     = "Nats-Service-Error"
)
