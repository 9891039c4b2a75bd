package schema

import "encoding/json"

// Event types.
const (
	EventPut    = "put"
	EventDelete = "delete"
)

// Causes of an event.
const (
	CausePut          = "put"
	CauseDelete       = "delete"
	CauseLeaseExpired = "lease_expired"
	CauseLeaseRevoked = "lease_revoked"
)

// Headers set on every watch event.
const (
	HeaderRevision  = "Concord-Revision"
	HeaderOperation = "Concord-Operation"
)

// Operation header values.
const (
	OperationPut    = "PUT"
	OperationDelete = "DEL"
)

// Event is published on P.watch.<key> for every change of a key. All events
// of one command share Revision and are numbered by OpIndex from 0. A delete
// event has CreateRevision and Version 0, ModRevision = Revision, and Lease
// set to the lease the key was attached to, so a watcher can tell which lease
// expired.
type Event struct {
	Type           string          `json:"type"`
	Key            string          `json:"key"`
	Value          json.RawMessage `json:"value,omitempty"`
	Revision       int64           `json:"revision"`
	OpIndex        int             `json:"op_index"`
	CreateRevision int64           `json:"create_revision"`
	ModRevision    int64           `json:"mod_revision"`
	Version        int64           `json:"version"`
	Lease          int64           `json:"lease"`
	Cause          string          `json:"cause"`
}

// Operation returns the Concord-Operation header value of the event.
func (e *Event) Operation() string {
	if e.Type == EventDelete {
		return OperationDelete
	}
	return OperationPut
}
