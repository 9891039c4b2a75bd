package schema

import "time"

// The limits of the wire contract, each stated here once. The server's
// decoders, the state machine and the node's configuration use these
// constants; the JSON Schemas in json/ are static files that state the same
// numbers, and TestSchemaLimitsMatchGo fails when the two differ.

// Fixed limits: the same on every node.
const (
	// MaxLeaseID is the largest lease id: every id stays exact in a
	// float64, so clients in any language (JavaScript included) read it
	// without loss.
	MaxLeaseID = 1<<53 - 1
	// MaxTTL is the longest ttl in seconds (100 years); it keeps the
	// millisecond deadline arithmetic far from overflow.
	MaxTTL = 100 * 365 * 24 * 3600
	// MaxRevision is the largest revision the wire carries: like lease
	// ids, revisions stay exact in a float64.
	MaxRevision = 1<<53 - 1
	// MaxKeepAliveMany is the most leases one keepalive_many renews.
	MaxKeepAliveMany = 10_000
	// DefaultListLimit is the records a lease.list or kv.get returns when
	// it gives no limit; MaxListLimit the most it may ask for.
	DefaultListLimit = 1000
	MaxListLimit     = 10_000
	// DefaultChangesLimit is the events a kv.changes read returns when it
	// gives no limit; MaxChangesLimit the most it may ask for.
	DefaultChangesLimit = 100
	MaxChangesLimit     = 1000
	// DefaultHistoryLimit is the records a kv.history read returns when it
	// gives no limit; MaxHistoryLimit the most it may ask for.
	DefaultHistoryLimit = 100
	MaxHistoryLimit     = 1000
	// MaxTxnPrefixLimit bounds a prefix get or delete inside a transaction
	// (and is its default), so one log entry stays small however many keys
	// a prefix matches.
	MaxTxnPrefixLimit = 1000
	// MaxContentTypeBytes bounds a put's content_type, printable ASCII;
	// MaxPutMetadataBytes its metadata, a JSON object, compact.
	MaxContentTypeBytes = 256
	MaxPutMetadataBytes = 4 << 10
	// MaxIdempotencyKeyBytes is the longest idempotency key: the cache
	// holds up to IdempotencyEntries of them.
	MaxIdempotencyKeyBytes = 256
)

// Defaults of the limits an operator may change (flags of concord serve).
// The longest key is subjects.MaxKeyBytes, with the other key rules.
const (
	// DefaultMinTTL is the shortest ttl in seconds.
	DefaultMinTTL = 1
	// DefaultMaxValueBytes bounds a value, compact JSON.
	DefaultMaxValueBytes = 1 << 20
	// DefaultMaxMetadataBytes bounds a lease's metadata, compact JSON.
	DefaultMaxMetadataBytes = 8 << 10
	// DefaultMaxLeases and DefaultMaxKeysPerLease are replicated limits:
	// the leases that may exist (anonymous ones count) and the keys one
	// lease may hold.
	DefaultMaxLeases       = 100_000
	DefaultMaxKeysPerLease = 10_000
	// A transaction holds at most DefaultMaxTxnCompares compares,
	// DefaultMaxTxnOps operations per branch and DefaultMaxTxnBytes bytes.
	DefaultMaxTxnCompares = 64
	DefaultMaxTxnOps      = 128
	DefaultMaxTxnBytes    = 1 << 20
	// The idempotency cache keeps at most DefaultIdempotencyEntries
	// replies, none older than DefaultIdempotencyRevisions revisions.
	DefaultIdempotencyEntries   = 100_000
	DefaultIdempotencyRevisions = 10_000
	// The history keeps the last DefaultHistoryRevisions revisions, none
	// older than DefaultHistoryAge of lease-clock time, whichever keeps less.
	DefaultHistoryRevisions = 1_000_000
	DefaultHistoryAge       = 24 * time.Hour
)
