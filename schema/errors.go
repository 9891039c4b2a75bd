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
	ErrInternal            = "internal"
)

// ErrorSpec is one row of the error table.
type ErrorSpec struct {
	Name string
	Code int
	// Retryable says a client may send the same request again.
	Retryable bool
	// Meaning is a one-line explanation for documentation.
	Meaning string
}

// ErrorTable lists every error a Concord endpoint can reply with.
var ErrorTable = []ErrorSpec{
	{ErrInvalidRequest, 400, false, "the request is malformed; the description names the field"},
	{ErrLeaseNotFound, 404, false, "the lease does not exist (never granted, expired or revoked)"},
	{ErrLeaseExists, 409, false, "a grant asked for an id that is taken"},
	{ErrNodeNotFound, 404, false, "the node is not a member of the cluster"},
	{ErrClusterMismatch, 409, false, "the node belongs to another cluster, or runs a release that cannot read its log"},
	{ErrBackupNotFound, 404, false, "the leader holds no backup of that id (finished, expired, or taken by an earlier leader)"},
	{ErrLeaseConflict, 409, false, "the key is attached to a different lease"},
	{ErrIdempotencyConflict, 409, false, "the idempotency key was used for a different request"},
	{ErrCompacted, 410, false, "the requested revision is below the compaction floor"},
	{ErrTooLarge, 413, false, "a value, metadata or request exceeds its size limit"},
	{ErrLimitExceeded, 429, false, "a count limit (leases, keys per lease) would be exceeded"},
	{ErrNotLeader, 503, true, "this node is not the leader; retry"},
	{ErrUnavailable, 503, true, "the cluster cannot serve the request now; retry"},
	{ErrInternal, 500, false, "an unexpected server error"},
}

var errorCodes = func() map[string]int {
	m := make(map[string]int, len(ErrorTable))
	for _, e := range ErrorTable {
		m[e.Name] = e.Code
	}
	return m
}()

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
	code, ok := errorCodes[name]
	if !ok {
		code, name = 500, ErrInternal
	}
	return &Error{Code: code, Name: name, Description: fmt.Sprintf(format, args...)}
}

// Error implements error.
func (e *Error) Error() string { return fmt.Sprintf("%s (%d): %s", e.Name, e.Code, e.Description) }

// Retryable reports whether the same request may be sent again.
func (e *Error) Retryable() bool { return e.Code == 503 }

// Micro error headers, as the nats.go micro framework sets them.
const (
	HeaderErrorCode = "Nats-Service-Error-Code"
	HeaderError     = "Nats-Service-Error"
)
