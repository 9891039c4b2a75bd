package schema

import "encoding/json"

// KeyValue is one key's record as replies carry it.
type KeyValue struct {
	Key string `json:"key"`
	// Value is absent when the read asked for keys only.
	Value          json.RawMessage `json:"value,omitempty"`
	CreateRevision int64           `json:"create_revision"`
	ModRevision    int64           `json:"mod_revision"`
	Version        int64           `json:"version"`
	// Lease is the id of the lease the key is attached to, if any.
	Lease int64 `json:"lease,omitempty"`
	// RemainingMS is the time left on the key's lease, when it has one.
	RemainingMS *int64 `json:"remaining_ms,omitempty"`
	// ContentType and Metadata are what the put that wrote the value
	// carried, stored and returned unchanged, never interpreted.
	ContentType string          `json:"content_type,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// KVPutRequest is the body of P.kv.put.
type KVPutRequest struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
	// Lease attaches the key to an existing lease; 0 means none. It is a
	// pointer so that a lease given together with ttl is refused even as 0.
	Lease *int64 `json:"lease,omitempty"`
	// TTL attaches the key to a new anonymous lease of this many seconds.
	TTL    *int64 `json:"ttl,omitempty"`
	PrevKV bool   `json:"prev_kv,omitempty"`
	// ContentType and Metadata are stored with the value and returned
	// unchanged; a put without them clears them.
	ContentType string          `json:"content_type,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
	// IdempotencyKey makes a retry return the first reply instead of
	// applying twice (the Concord-Idempotency-Key header means the same).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// KVPutReply answers P.kv.put.
type KVPutReply struct {
	Revision int64     `json:"revision"`
	PrevKV   *KeyValue `json:"prev_kv,omitempty"`
}

// KVGetRequest is the body of P.kv.get. Exactly one of Key and Prefix is set.
type KVGetRequest struct {
	Key    *string `json:"key,omitempty"`
	Prefix *string `json:"prefix,omitempty"`
	// RangeStart and RangeEnd select the byte-wise range [RangeStart,
	// RangeEnd); without RangeEnd, to the end of the keyspace.
	RangeStart *string `json:"range_start,omitempty"`
	RangeEnd   *string `json:"range_end,omitempty"`
	// Limit bounds the records returned; 0 means the default.
	Limit int `json:"limit,omitempty"`
	// After continues a prefix listing after this key.
	After     string `json:"after,omitempty"`
	KeysOnly  bool   `json:"keys_only,omitempty"`
	CountOnly bool   `json:"count_only,omitempty"`
	// Serializable allows a local read without confirming leadership.
	Serializable bool `json:"serializable,omitempty"`
	// Revision reads the keys as they stood right after this revision
	// committed; 0 means the present.
	Revision int64 `json:"revision,omitempty"`
}

// KVGetReply answers P.kv.get. Count is the number of keys matching the
// request regardless of Limit; More says that records were left out.
type KVGetReply struct {
	Revision int64      `json:"revision"`
	KVs      []KeyValue `json:"kvs"`
	Count    int64      `json:"count"`
	More     bool       `json:"more"`
}

// KVDeleteRequest is the body of P.kv.delete. Exactly one of Key and Prefix is set.
type KVDeleteRequest struct {
	Key    *string `json:"key,omitempty"`
	Prefix *string `json:"prefix,omitempty"`
	// RangeStart and RangeEnd select the byte-wise range [RangeStart,
	// RangeEnd); without RangeEnd, to the end of the keyspace.
	RangeStart *string `json:"range_start,omitempty"`
	RangeEnd   *string `json:"range_end,omitempty"`
	PrevKV     bool    `json:"prev_kv,omitempty"`
	// IdempotencyKey: as for KVPutRequest.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// KVDeleteReply answers P.kv.delete.
type KVDeleteReply struct {
	Revision int64      `json:"revision"`
	Deleted  int64      `json:"deleted"`
	PrevKVs  []KeyValue `json:"prev_kvs,omitempty"`
}

// KVChangesRequest is the body of P.kv.changes: the events of a key or of a
// key prefix after a position in the change log.
type KVChangesRequest struct {
	Key    *string `json:"key,omitempty"`
	Prefix *string `json:"prefix,omitempty"`
	// RangeStart and RangeEnd select the byte-wise range [RangeStart,
	// RangeEnd); without RangeEnd, to the end of the keyspace.
	RangeStart *string `json:"range_start,omitempty"`
	RangeEnd   *string `json:"range_end,omitempty"`
	// AfterRevision: events of later revisions. AfterOpIndex, when set,
	// continues inside AfterRevision after that op_index (a reply that
	// stopped part-way through a revision says where).
	AfterRevision int64 `json:"after_revision"`
	AfterOpIndex  *int  `json:"after_op_index,omitempty"`
	// Limit bounds the events returned; 0 means the default (100).
	Limit int `json:"limit,omitempty"`
}

// KVChangesReply answers P.kv.changes. To continue, send NextRevision (and
// NextOpIndex when it is not -1) as the next request's position. More says
// the reply stopped early. CompactRevision is the log's floor: positions
// below it get 410 compacted.
type KVChangesReply struct {
	Events          []Event `json:"events"`
	NextRevision    int64   `json:"next_revision"`
	NextOpIndex     int     `json:"next_op_index"`
	More            bool    `json:"more"`
	CompactRevision int64   `json:"compact_revision"`
}

// KVHistoryRequest is the body of P.kv.history: the versions of one key in
// [FromRevision, ToRevision], oldest first unless NewestFirst.
type KVHistoryRequest struct {
	Key string `json:"key"`
	// FromRevision and ToRevision bound the window, both ends included;
	// 0 means from the oldest retained change, and to the present.
	FromRevision int64 `json:"from_revision,omitempty"`
	ToRevision   int64 `json:"to_revision,omitempty"`
	// Limit bounds the records returned; 0 means the default.
	Limit int `json:"limit,omitempty"`
	// AfterRevision continues a listing: records after this revision
	// (before it, when NewestFirst).
	AfterRevision int64 `json:"after_revision,omitempty"`
	NewestFirst   bool  `json:"newest_first,omitempty"`
	Serializable  bool  `json:"serializable,omitempty"`
}

// KVHistoryReply answers P.kv.history. Each record is the change as its
// watch event carried it: a put with the value it wrote, or a delete
// (version 0) with its cause. More says records were left out; the next
// page asks with AfterRevision = NextRevision. A page never splits the
// changes of one revision.
type KVHistoryReply struct {
	Key             string  `json:"key"`
	Records         []Event `json:"records"`
	More            bool    `json:"more"`
	NextRevision    int64   `json:"next_revision,omitempty"`
	Revision        int64   `json:"revision"`
	CompactRevision int64   `json:"compact_revision"`
}

// KVCompactRequest is the body of P.kv.compact: drop the history at and
// below Revision.
type KVCompactRequest struct {
	Revision int64 `json:"revision"`
}

// KVCompactReply answers P.kv.compact with the floor after it, which is
// never lower than before (compacting again is a no-op).
type KVCompactReply struct {
	Revision        int64 `json:"revision"`
	CompactRevision int64 `json:"compact_revision"`
}
