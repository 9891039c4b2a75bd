package fsm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/concord-io/concord/schema"
)

// Command formats, the first byte of every encoded command: formatPlain
// has no idempotency key, formatKeyed carries one after the header.
const (
	formatPlain = 1
	formatKeyed = 2
	// formatTenant carries the tenant, then the idempotency key (empty
	// when there is none), after the header: a command of the default
	// tenant keeps format 1 or 2, so its entry is what it always was.
	formatTenant = 4
)

// headerLen is format byte + op byte + 8-byte lease-clock stamp.
const headerLen = 10

// maxNow bounds the lease-clock stamp Decode accepts, in milliseconds
// (146 million years): far above any clock, and low enough that deadlines
// and ages computed from it cannot overflow.
const maxNow = 1 << 62

// Grant creates a lease.
type Grant struct {
	// ID is the requested id, or 0 to take the next from the counter.
	ID       int64
	TTL      int64
	Metadata json.RawMessage
}

// KeepAlive renews a lease, optionally with a new ttl.
type KeepAlive struct {
	ID  int64
	TTL int64
}

// KeepAliveMany renews every listed lease that exists (a session process
// holding many leases sends one of these per interval).
type KeepAliveMany struct {
	IDs []int64
}

// Revoke deletes a lease and its keys.
type Revoke struct {
	ID int64
}

// Put writes a key. Lease and TTL are mutually exclusive (the caller checks).
type Put struct {
	Key    string
	Value  json.RawMessage
	Lease  int64
	TTL    int64
	PrevKV bool
	// ContentType and Metadata are stored with the value and returned
	// unchanged; a put without them clears them.
	ContentType string
	Metadata    json.RawMessage
}

// Delete removes one key, or every key with a prefix when IsPrefix is set.
type Delete struct {
	Key      string
	IsPrefix bool
	// IsRange deletes [Key, RangeEnd), RangeEnd "" meaning to the end of
	// the keyspace.
	IsRange  bool
	RangeEnd string
	PrevKV   bool
	// Limit, when positive, makes a prefix delete that matches more keys
	// than this fail with ErrTooLarge instead of deleting them (used in
	// transactions, which must stay bounded).
	Limit int64
	// ByTxn marks a delete of a transaction whose tombstones say so (cause
	// "txn"). It is a flag of the entry, not implied by the transaction, so
	// that a release that predates it, replaying the same log, is never
	// asked to apply it (RequiredLogFormat) and every replica records the
	// same cause.
	ByTxn bool
}

// Expire deletes the listed leases whose deadline has passed at the
// command's time. With no ids it is a tick: it only advances the lease clock.
type Expire struct {
	IDs []int64
}

// Limits are the limits decided in Apply. They are replicated state, set by
// a command, so every replica enforces the same numbers.
type Limits struct {
	MaxLeases       int64 `json:"max_leases"`
	MaxKeysPerLease int64 `json:"max_keys_per_lease"`
	// IdempotencyEntries bounds the idempotency cache; the oldest entry
	// goes first.
	IdempotencyEntries int64 `json:"idempotency_entries,omitempty"`
	// IdempotencyRevisions drops entries recorded more than this many
	// revisions ago.
	IdempotencyRevisions int64 `json:"idempotency_revisions,omitempty"`
	// HistoryRevisions and HistoryAgeMS bound the history: it keeps the
	// last HistoryRevisions revisions, none older than HistoryAgeMS of
	// lease-clock time, whichever keeps less. (The JSON names, in snapshot
	// headers, are those of the change log the history replaced.)
	HistoryRevisions int64 `json:"changes_max,omitempty"`
	HistoryAgeMS     int64 `json:"changes_max_age_ms,omitempty"`
}

// DefaultLimits are the limits of a new state machine.
var DefaultLimits = Limits{MaxLeases: schema.DefaultMaxLeases, MaxKeysPerLease: schema.DefaultMaxKeysPerLease,
	IdempotencyEntries: schema.DefaultIdempotencyEntries, IdempotencyRevisions: schema.DefaultIdempotencyRevisions,
	HistoryRevisions: schema.DefaultHistoryRevisions, HistoryAgeMS: schema.DefaultHistoryAge.Milliseconds()}

// Command is one decoded log entry.
type Command struct {
	Op Op
	// Now is the lease-clock time, in milliseconds, stamped by the leader.
	Now int64
	// IdempotencyKey, when set, makes a retry of the same command return
	// the first reply instead of applying twice.
	IdempotencyKey string
	// Tenant is the tenant whose space the command applies in;
	// DefaultTenant for Concord's own account.
	Tenant string
	// Body is one of *Grant, *KeepAlive, *KeepAliveMany, *Revoke, *Put,
	// *Delete, *Expire, *Limits, *Txn: the body types of the table ops.
	Body any
}

// Encode serialises a command without an idempotency key.
func Encode(now int64, body any) ([]byte, error) {
	return EncodeKeyed(now, "", body)
}

// EncodeKeyed serialises a command of the default tenant for the Raft
// log: a header (format, op, lease-clock stamp), the idempotency key if
// there is one, and a binary body.
func EncodeKeyed(now int64, idempotencyKey string, body any) ([]byte, error) {
	return EncodeFor(now, DefaultTenant, idempotencyKey, body)
}

// EncodeFor serialises a command of tenant. A command of another tenant
// than the default needs every member to read LogFormatTenant.
func EncodeFor(now int64, tenant, idempotencyKey string, body any) ([]byte, error) {
	w := encoder{buf: make([]byte, headerLen, headerLen+64)}
	switch {
	case tenant != DefaultTenant:
		if err := ValidateTenant(tenant); err != nil {
			return nil, fmt.Errorf("encode command: %w", err)
		}
		w.buf[0] = formatTenant
		w.bytes([]byte(tenant))
		w.bytes([]byte(idempotencyKey))
	case idempotencyKey != "":
		w.buf[0] = formatKeyed
		w.bytes([]byte(idempotencyKey))
	default:
		w.buf[0] = formatPlain
	}
	op, err := w.body(body)
	if err != nil {
		return nil, err
	}
	w.buf[1] = byte(op)
	binary.BigEndian.PutUint64(w.buf[2:], uint64(now))
	return w.buf, nil
}

// bodyHash identifies a command's request for the idempotency cache: the
// op and body, without the stamp or the key.
func bodyHash(body any) ([32]byte, error) {
	if t, ok := body.(*Txn); ok {
		// Whether a transaction's deletes are marked depends on the
		// releases the cluster ran when it was proposed, not on the
		// request: a retry across an upgrade is the same request.
		body = t.unmarked()
	}
	w := encoder{}
	op, err := w.body(body)
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(append(w.buf, byte(op))), nil
}

// body appends a command's body and returns its op.
func (w *encoder) body(body any) (Op, error) {
	op, ok := opOfBody(body)
	if !ok {
		return 0, fmt.Errorf("encode command: %w: unknown body type %T", ErrBadCommand, body)
	}
	*w = ops[op].encode(*w, body)
	return op, nil
}

// put, delete and txn write and read the bodies that transactions nest.
// Like append, they take and return their encoder or decoder by value, so
// that the table ops can hold them without moving either to the heap.

func (w encoder) put(p *Put) encoder {
	w.buf = slices.Grow(w.buf, len(p.Key)+len(p.Value)+24)
	w.bytes([]byte(p.Key))
	w.bytes(p.Value)
	w.varint(p.Lease)
	w.varint(p.TTL)
	extra := p.ContentType != "" || len(p.Metadata) > 0
	w.flags(p.PrevKV, extra)
	// Only a put that carries them writes them, flagged above: entries
	// written before they existed read as before.
	if extra {
		w.bytes([]byte(p.ContentType))
		w.bytes(p.Metadata)
	}
	return w
}

func (w encoder) delete(d *Delete) encoder {
	w.bytes([]byte(d.Key))
	w.flags(d.IsPrefix, d.PrevKV, d.IsRange, d.ByTxn)
	w.varint(d.Limit)
	// Only a range delete writes its end, flagged above: every entry
	// written before ranges existed, and every delete in a transaction,
	// reads as before.
	if d.IsRange {
		w.bytes([]byte(d.RangeEnd))
	}
	return w
}

// Decode parses a command from the Raft log.
func Decode(data []byte) (Command, error) {
	if len(data) < headerLen {
		return Command{}, fmt.Errorf("%w: %d bytes is shorter than the header", ErrBadCommand, len(data))
	}
	if data[0] == formatBatch {
		return Command{}, fmt.Errorf("%w: a batch entry is not a single command (ApplyEntry applies it)", ErrBadCommand)
	}
	if !isSingle(data[0]) {
		return Command{}, fmt.Errorf("%w: unknown format %d", ErrBadCommand, data[0])
	}
	c := Command{Op: Op(data[1]), Now: int64(binary.BigEndian.Uint64(data[2:]))}
	if c.Now < 0 || c.Now > maxNow {
		return Command{}, fmt.Errorf("%w: lease clock %d is outside 0 to %d", ErrBadCommand, c.Now, int64(maxNow))
	}
	r := decoder{buf: data[headerLen:]}
	switch data[0] {
	case formatKeyed:
		c.IdempotencyKey = string(r.bytes())
		if c.IdempotencyKey == "" && r.err == nil {
			r.err = errors.New("empty idempotency key")
		}
	case formatTenant:
		c.Tenant = string(r.bytes())
		c.IdempotencyKey = string(r.bytes())
		if r.err == nil && c.Tenant == DefaultTenant {
			// The default tenant has one encoding, formats 1 and 2.
			r.err = errors.New("tenant entry for the default tenant")
		}
		if r.err == nil {
			if err := ValidateTenant(c.Tenant); err != nil {
				r.err = err
			}
		}
	}
	spec := c.Op.spec()
	if spec == nil {
		return Command{}, fmt.Errorf("%w: unknown op %d", ErrBadCommand, data[1])
	}
	c.Body, r = spec.decode(r)
	if r.err != nil {
		return Command{}, fmt.Errorf("%w: %s body: %v", ErrBadCommand, c.Op, r.err)
	}
	if len(r.buf) != 0 {
		return Command{}, fmt.Errorf("%w: %s body: %d trailing bytes", ErrBadCommand, c.Op, len(r.buf))
	}
	return c, nil
}

// isSingle reports whether format is that of a single-command entry.
func isSingle(format byte) bool {
	return format == formatPlain || format == formatKeyed || format == formatTenant
}

func (d decoder) put() (*Put, decoder) {
	p := &Put{Key: string(d.bytes()), Value: d.json(), Lease: d.varint(), TTL: d.ttl()}
	switch {
	case d.err != nil:
	case p.Key == "":
		// "" is where a range over every key starts, not a key.
		d.err = errors.New("put of the empty key")
	case p.Value == nil:
		d.err = errors.New("put without a value")
	}
	f := d.flags()
	p.PrevKV = f&1 != 0
	if f&2 != 0 {
		p.ContentType = string(d.bytes())
		// Through json(), like a value: the service only proposes a
		// compact object, and an entry that holds anything else must
		// be refused here, not stored and later unencodable in a
		// reply, an event or a snapshot.
		if m := d.json(); len(m) > 0 {
			if m[0] != '{' && d.err == nil {
				d.err = errors.New("put metadata is not a JSON object")
			}
			p.Metadata = m
		}
	}
	return p, d
}

func (d decoder) delete() (*Delete, decoder) {
	del := &Delete{Key: string(d.bytes())}
	f := d.flags()
	del.IsPrefix, del.PrevKV, del.IsRange, del.ByTxn = f&1 != 0, f&2 != 0, f&4 != 0, f&8 != 0
	del.Limit = d.varint()
	if del.IsRange {
		del.RangeEnd = string(d.bytes())
	}
	return del, d
}

// plainDelete reads a kv.delete's body: a delete that may not carry the
// mark of a transaction's (Delete.ByTxn), which only a transaction's
// deletes carry. Refused here, so that every entry that decodes applies.
func (d decoder) plainDelete() (*Delete, decoder) {
	del, d := d.delete()
	if del.ByTxn {
		d.fail("delete (marked as a transaction's outside one)")
	}
	return del, d
}

// ids writes a list of lease ids.
func (e *encoder) ids(ids []int64) {
	e.uvarint(uint64(len(ids)))
	for _, id := range ids {
		e.varint(id)
	}
}

// ids reads a list of lease ids; an empty list decodes as nil.
func (d *decoder) ids() []int64 {
	n := d.count()
	if n == 0 {
		return nil
	}
	ids := make([]int64, 0, n)
	for i := 0; i < n; i++ {
		ids = append(ids, d.varint())
	}
	return ids
}

// count reads a length that must not exceed the bytes left (every element
// takes at least one), so corrupt data cannot make Decode allocate wildly.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.buf)) {
		d.fail("count")
		return 0
	}
	return int(n)
}

type encoder struct{ buf []byte }

func (e *encoder) varint(v int64)   { e.buf = binary.AppendVarint(e.buf, v) }
func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) bytes(b []byte) {
	e.uvarint(uint64(len(b)))
	e.buf = append(e.buf, b...)
}

// flags packs booleans into one byte, the first in the lowest bit.
func (e *encoder) flags(bits ...bool) {
	var f byte
	for i, b := range bits {
		if b {
			f |= 1 << i
		}
	}
	e.buf = append(e.buf, f)
}

// decoder reads what encoder wrote; the first error sticks and later reads
// return zero values.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated or corrupt %s", what)
	}
	d.buf = nil
}

func (d *decoder) varint() int64 { return readVarint(d, binary.Varint, "integer") }

// ttl reads a ttl in seconds, 0 (none) to schema.MaxTTL: with the lease
// clock under maxNow, a deadline now+ttl*1000 cannot overflow.
func (d *decoder) ttl() int64 {
	v := d.varint()
	if d.err == nil && (v < 0 || v > schema.MaxTTL) {
		d.err = fmt.Errorf("ttl %d is outside 0 to %d", v, schema.MaxTTL)
	}
	return v
}
func (d *decoder) uvarint() uint64 { return readVarint(d, binary.Uvarint, "length") }

// readVarint reads one varint with read (binary.Varint or Uvarint); a
// truncated or overlong one fails the decoder as a corrupt what.
func readVarint[T int64 | uint64](d *decoder, read func([]byte) (T, int), what string) T {
	v, n := read(d.buf)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// bytes returns a length-prefixed field, or nil when it is empty, so an
// absent value stays absent across encode and decode.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.buf)) {
		d.fail("byte string")
		return nil
	}
	if n == 0 {
		return nil
	}
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

// json returns a length-prefixed JSON document as a compact copy: the state
// must not keep pointers into the log entry, whose buffer belongs to the
// caller, and every replica must hold the same bytes however the document
// was spaced. Invalid JSON is an error, so a snapshot can always be written.
func (d *decoder) json() json.RawMessage {
	b := d.bytes()
	if b == nil {
		return nil
	}
	var buf bytes.Buffer
	buf.Grow(len(b))
	if err := json.Compact(&buf, b); err != nil {
		if d.err == nil {
			d.err = fmt.Errorf("invalid JSON: %v", err)
		}
		return nil
	}
	return buf.Bytes()
}

func (d *decoder) flags() byte {
	if len(d.buf) == 0 {
		d.fail("flags")
		return 0
	}
	f := d.buf[0]
	d.buf = d.buf[1:]
	return f
}
