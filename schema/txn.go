package schema

import "encoding/json"

// Compare targets and operators of P.kv.txn.
const (
	TargetExists         = "exists"
	TargetValue          = "value"
	TargetField          = "field"
	TargetVersion        = "version"
	TargetCreateRevision = "create_revision"
	TargetModRevision    = "mod_revision"
	TargetLease          = "lease"
	TargetTTL            = "ttl"
)

// TxnCompare is one condition of a transaction.
type TxnCompare struct {
	Key    string `json:"key"`
	Target string `json:"target"`
	// Op is one of ==, !=, <, <=, >, >=.
	Op string `json:"op"`
	// Path is the JSON Pointer into the key's value, for target "field".
	Path *string `json:"path,omitempty"`
	// Value is the operand: a boolean for exists, an integer for version,
	// create_revision, mod_revision, lease and ttl, any JSON for value and
	// field.
	Value json.RawMessage `json:"value"`
}

// TxnGet is a get inside a transaction: P.kv.get's fields, without
// serializable (a transaction is always linearizable).
type TxnGet struct {
	Key       *string `json:"key,omitempty"`
	Prefix    *string `json:"prefix,omitempty"`
	Limit     int     `json:"limit,omitempty"`
	After     string  `json:"after,omitempty"`
	KeysOnly  bool    `json:"keys_only,omitempty"`
	CountOnly bool    `json:"count_only,omitempty"`
}

// TxnDelete is a delete inside a transaction: P.kv.delete's fields plus a
// limit; a prefix matching more keys than the limit fails the transaction.
type TxnDelete struct {
	Key    *string `json:"key,omitempty"`
	Prefix *string `json:"prefix,omitempty"`
	PrevKV bool    `json:"prev_kv,omitempty"`
	Limit  int     `json:"limit,omitempty"`
}

// TxnPut is a put inside a transaction: P.kv.put's fields.
type TxnPut struct {
	Key    string          `json:"key"`
	Value  json.RawMessage `json:"value"`
	Lease  *int64          `json:"lease,omitempty"`
	TTL    *int64          `json:"ttl,omitempty"`
	PrevKV bool            `json:"prev_kv,omitempty"`
	// ContentType and Metadata: as in KVPutRequest.
	ContentType string          `json:"content_type,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// TxnOp is one operation: exactly one of Put, Get and Delete.
type TxnOp struct {
	Put    *TxnPut    `json:"put,omitempty"`
	Get    *TxnGet    `json:"get,omitempty"`
	Delete *TxnDelete `json:"delete,omitempty"`
}

// KVTxnRequest is the body of P.kv.txn.
type KVTxnRequest struct {
	Compare        []TxnCompare `json:"compare,omitempty"`
	Success        []TxnOp      `json:"success,omitempty"`
	Failure        []TxnOp      `json:"failure,omitempty"`
	IdempotencyKey string       `json:"idempotency_key,omitempty"`
}

// TxnResponse is one operation's reply, in the shape of the standalone
// endpoint's reply.
type TxnResponse struct {
	Put    *KVPutReply    `json:"put,omitempty"`
	Get    *KVGetReply    `json:"get,omitempty"`
	Delete *KVDeleteReply `json:"delete,omitempty"`
}

// KVTxnReply answers P.kv.txn. A transaction whose compares fail is not an
// error: Succeeded is false and Responses are the failure branch's.
type KVTxnReply struct {
	Succeeded bool          `json:"succeeded"`
	Revision  int64         `json:"revision"`
	Responses []TxnResponse `json:"responses"`
}

// HeaderIdempotencyKey carries an idempotency key on any mutating request.
const HeaderIdempotencyKey = "Concord-Idempotency-Key"
