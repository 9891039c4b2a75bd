package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// Op identifies a command type in the log.
type Op byte

// Command types. The numbers are part of the log format: never reuse one.
const (
	OpGrant     Op = 1
	OpKeepAlive Op = 2
	OpRevoke    Op = 3
	OpPut       Op = 4
	OpDelete    Op = 5
	OpExpire    Op = 6
	OpSetLimits Op = 7
)

func (o Op) String() string {
	switch o {
	case OpGrant:
		return "grant"
	case OpKeepAlive:
		return "keepalive"
	case OpRevoke:
		return "revoke"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpExpire:
		return "expire"
	case OpSetLimits:
		return "set_limits"
	}
	return fmt.Sprintf("op(%d)", byte(o))
}

// commandFormat is the first byte of every encoded command.
const commandFormat = 1

// headerLen is format byte + op byte + 8-byte lease-clock stamp.
const headerLen = 10

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
}

// Delete removes one key, or every key with a prefix when IsPrefix is set.
type Delete struct {
	Key      string
	IsPrefix bool
	PrevKV   bool
}

// Expire deletes the listed leases whose deadline has passed at the
// command's time. With no ids it is a tick: it only advances the lease clock.
type Expire struct {
	IDs []int64
}

// Limits are the count limits decided in Apply. They are replicated state,
// set by a command, so every replica enforces the same numbers.
type Limits struct {
	MaxLeases       int64 `json:"max_leases"`
	MaxKeysPerLease int64 `json:"max_keys_per_lease"`
}

// DefaultLimits are the limits of a new state machine.
var DefaultLimits = Limits{MaxLeases: 100_000, MaxKeysPerLease: 10_000}

// Command is one decoded log entry.
type Command struct {
	Op Op
	// Now is the lease-clock time, in milliseconds, stamped by the leader.
	Now int64
	// Body is one of *Grant, *KeepAlive, *Revoke, *Put, *Delete, *Expire, *Limits.
	Body any
}

// Encode serialises a command for the Raft log: a header (format, op,
// lease-clock stamp) and a binary body. Values and metadata are stored as
// the caller gave them, byte for byte.
func Encode(now int64, body any) ([]byte, error) {
	var op Op
	w := encoder{buf: make([]byte, headerLen, headerLen+64)}
	switch b := body.(type) {
	case *Grant:
		op = OpGrant
		w.varint(b.ID)
		w.varint(b.TTL)
		w.bytes(b.Metadata)
	case *KeepAlive:
		op = OpKeepAlive
		w.varint(b.ID)
		w.varint(b.TTL)
	case *Revoke:
		op = OpRevoke
		w.varint(b.ID)
	case *Put:
		op = OpPut
		w.buf = slices.Grow(w.buf, len(b.Key)+len(b.Value)+24)
		w.bytes([]byte(b.Key))
		w.bytes(b.Value)
		w.varint(b.Lease)
		w.varint(b.TTL)
		w.flags(b.PrevKV)
	case *Delete:
		op = OpDelete
		w.bytes([]byte(b.Key))
		w.flags(b.IsPrefix, b.PrevKV)
	case *Expire:
		op = OpExpire
		w.uvarint(uint64(len(b.IDs)))
		for _, id := range b.IDs {
			w.varint(id)
		}
	case *Limits:
		op = OpSetLimits
		w.varint(b.MaxLeases)
		w.varint(b.MaxKeysPerLease)
	default:
		return nil, fmt.Errorf("encode command: %w: unknown body type %T", ErrBadCommand, body)
	}
	w.buf[0] = commandFormat
	w.buf[1] = byte(op)
	binary.BigEndian.PutUint64(w.buf[2:], uint64(now))
	return w.buf, nil
}

// Decode parses a command from the Raft log.
func Decode(data []byte) (Command, error) {
	if len(data) < headerLen {
		return Command{}, fmt.Errorf("%w: %d bytes is shorter than the header", ErrBadCommand, len(data))
	}
	if data[0] != commandFormat {
		return Command{}, fmt.Errorf("%w: unknown format %d", ErrBadCommand, data[0])
	}
	c := Command{Op: Op(data[1]), Now: int64(binary.BigEndian.Uint64(data[2:]))}
	r := decoder{buf: data[headerLen:]}
	switch c.Op {
	case OpGrant:
		c.Body = &Grant{ID: r.varint(), TTL: r.varint(), Metadata: r.json()}
	case OpKeepAlive:
		c.Body = &KeepAlive{ID: r.varint(), TTL: r.varint()}
	case OpRevoke:
		c.Body = &Revoke{ID: r.varint()}
	case OpPut:
		p := &Put{Key: string(r.bytes()), Value: r.json(), Lease: r.varint(), TTL: r.varint()}
		if p.Value == nil && r.err == nil {
			r.err = errors.New("put without a value")
		}
		f := r.flags()
		p.PrevKV = f&1 != 0
		c.Body = p
	case OpDelete:
		d := &Delete{Key: string(r.bytes())}
		f := r.flags()
		d.IsPrefix, d.PrevKV = f&1 != 0, f&2 != 0
		c.Body = d
	case OpExpire:
		n := r.uvarint()
		if n > uint64(len(r.buf)) { // each id takes at least one byte
			return Command{}, fmt.Errorf("%w: expire of %d ids in %d bytes", ErrBadCommand, n, len(r.buf))
		}
		e := &Expire{}
		if n > 0 {
			e.IDs = make([]int64, 0, n)
		}
		for i := uint64(0); i < n; i++ {
			e.IDs = append(e.IDs, r.varint())
		}
		c.Body = e
	case OpSetLimits:
		c.Body = &Limits{MaxLeases: r.varint(), MaxKeysPerLease: r.varint()}
	default:
		return Command{}, fmt.Errorf("%w: unknown op %d", ErrBadCommand, data[1])
	}
	if r.err != nil {
		return Command{}, fmt.Errorf("%w: %s body: %v", ErrBadCommand, c.Op, r.err)
	}
	if len(r.buf) != 0 {
		return Command{}, fmt.Errorf("%w: %s body: %d trailing bytes", ErrBadCommand, c.Op, len(r.buf))
	}
	return c, nil
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

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("integer")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("length")
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
