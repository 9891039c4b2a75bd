package fsm

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/concord-io/concord/schema"
)

// The command set. Each command type is described once, in the table ops:
// its name, whether idempotency keys cover it, how its body is written to
// and read from the log, and how it applies. Adding a command is a number
// below, a body type, and one entry in ops; TestOpTable fails while any Op
// lacks a complete entry.

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
	OpTxn       Op = 8
	// OpKeepAliveMany renews many leases in one entry.
	OpKeepAliveMany Op = 9
	// OpCompact raises the history's floor.
	OpCompact Op = 10
	// OpSetQuota sets a tenant's quota.
	OpSetQuota Op = 11
	// OpTenantMove is a step of a tenant's move between clusters.
	OpTenantMove Op = 12
)

// keyRule says what an idempotency key on a command does. The zero value
// is no rule at all, so an entry that does not say fails TestOpTable
// instead of silently running without idempotency.
type keyRule byte

const (
	// keyRemembered: the command is a client request; a retry with the
	// same key gets the first reply instead of applying twice.
	keyRemembered keyRule = iota + 1
	// keyIgnored: the command is the leader's own (ticks, expiries, limit
	// changes); a key on it is carried but changes nothing.
	keyIgnored
)

// opSpec is everything the log format and Apply know about one command
// type. Its functions take the body as any; opEntry builds them from typed
// ones. The encoder and decoder go in and out by value: a pointer passed
// through a function value escapes, which would cost an allocation per
// command.
type opSpec struct {
	name string
	keys keyRule
	// body is the type of the command's body, a pointer to its struct.
	body reflect.Type
	// encode appends the body to an entry; decode reads it back.
	encode func(w encoder, body any) encoder
	decode func(d decoder) (any, decoder)
	// apply applies the body at lease-clock time now.
	apply func(s *State, now int64, body any) Result
}

// ops is the command set, indexed by Op.
var ops = [...]opSpec{
	OpGrant: opEntry("grant", keyRemembered,
		func(w encoder, b *Grant) encoder { w.varint(b.ID); w.varint(b.TTL); w.bytes(b.Metadata); return w },
		func(d decoder) (*Grant, decoder) {
			b := &Grant{ID: d.varint(), TTL: d.ttl(), Metadata: d.json()}
			if d.err == nil && b.TTL == 0 {
				d.err = errors.New("grant without a ttl")
			}
			return b, d
		},
		applyReply((*State).grant)),

	OpKeepAlive: opEntry("keepalive", keyRemembered,
		func(w encoder, b *KeepAlive) encoder { w.varint(b.ID); w.varint(b.TTL); return w },
		func(d decoder) (*KeepAlive, decoder) { b := &KeepAlive{ID: d.varint(), TTL: d.ttl()}; return b, d },
		applyReply((*State).keepAlive)),

	OpRevoke: opEntry("revoke", keyRemembered,
		func(w encoder, b *Revoke) encoder { w.varint(b.ID); return w },
		func(d decoder) (*Revoke, decoder) { b := &Revoke{ID: d.varint()}; return b, d },
		func(s *State, _ int64, b *Revoke) (r Result) { r.Reply, r.Events, r.Err = s.revoke(b); return r }),

	OpPut:    opEntry("put", keyRemembered, encoder.put, decoder.put, applyChange((*State).put)),
	OpDelete: opEntry("delete", keyRemembered, encoder.delete, decoder.plainDelete, applyChange((*State).delete)),
	OpTxn:    opEntry("txn", keyRemembered, encoder.txn, decoder.txn, applyChange((*State).txn)),

	OpExpire: opEntry("expire", keyIgnored,
		func(w encoder, b *Expire) encoder { w.ids(b.IDs); return w },
		func(d decoder) (*Expire, decoder) { b := &Expire{IDs: d.ids()}; return b, d },
		func(s *State, now int64, b *Expire) (r Result) { r.Events, r.Expired = s.expire(now, b); return r }),

	OpSetLimits: opEntry("set_limits", keyIgnored,
		func(w encoder, b *Limits) encoder {
			for _, v := range []int64{b.MaxLeases, b.MaxKeysPerLease, b.IdempotencyEntries, b.IdempotencyRevisions,
				b.HistoryRevisions, b.HistoryAgeMS} {
				w.varint(v)
			}
			return w
		},
		func(d decoder) (*Limits, decoder) {
			// Later fields were added over time; an entry written before
			// them ends early and takes the defaults.
			b := &Limits{MaxLeases: d.varint(), MaxKeysPerLease: d.varint()}
			if len(d.buf) > 0 {
				b.IdempotencyEntries, b.IdempotencyRevisions = d.varint(), d.varint()
			}
			if len(d.buf) > 0 {
				b.HistoryRevisions, b.HistoryAgeMS = d.varint(), d.varint()
			}
			return b, d
		},
		func(s *State, _ int64, b *Limits) Result { s.limits = b.withDefaults(); return Result{} }),

	OpKeepAliveMany: opEntry("keepalive_many", keyRemembered,
		func(w encoder, b *KeepAliveMany) encoder { w.ids(b.IDs); return w },
		func(d decoder) (*KeepAliveMany, decoder) { b := &KeepAliveMany{IDs: d.ids()}; return b, d },
		func(s *State, now int64, b *KeepAliveMany) Result {
			if err := s.checkKeepAliveManyQuota(len(b.IDs)); err != nil {
				return Result{Err: err}
			}
			return Result{Reply: s.keepAliveMany(now, b)}
		}),

	OpCompact: opEntry("compact", keyRemembered,
		func(w encoder, b *Compact) encoder { w.varint(b.Revision); return w },
		func(d decoder) (*Compact, decoder) { b := &Compact{Revision: d.varint()}; return b, d },
		applyReply((*State).compact)),

	OpSetQuota: opEntry("set_quota", keyIgnored,
		func(w encoder, b *SetQuota) encoder {
			w.bytes([]byte(b.Tenant))
			w.flags(b.Clear)
			for _, v := range b.Quota.fields() {
				w.varint(v)
			}
			return w
		},
		func(d decoder) (*SetQuota, decoder) {
			b := &SetQuota{Tenant: string(d.bytes())}
			b.Clear = d.flags()&1 != 0
			f := make([]int64, 5)
			for i := range f {
				f[i] = d.varint()
			}
			b.Quota = quotaOf(f)
			if d.err == nil {
				d.err = b.check()
			}
			return b, d
		},
		applyReply((*State).setQuota)),

	OpTenantMove: opEntry("tenant_move", keyRemembered, encoder.tenantMove, decoder.tenantMove, applyReply((*State).moveTenant)),
}

// opEntry builds a table entry from functions typed for the body *T.
func opEntry[T any](name string, keys keyRule, encode func(encoder, *T) encoder, decode func(decoder) (*T, decoder),
	apply func(*State, int64, *T) Result) opSpec {
	return opSpec{
		name:   name,
		keys:   keys,
		body:   reflect.TypeFor[*T](),
		encode: func(w encoder, body any) encoder { return encode(w, body.(*T)) },
		decode: func(d decoder) (any, decoder) {
			b, d := decode(d)
			return b, d
		},
		apply: func(s *State, now int64, body any) Result { return apply(s, now, body.(*T)) },
	}
}

// applyReply adapts a State method that replies and changes no key.
func applyReply[T any](f func(*State, int64, *T) (any, error)) func(*State, int64, *T) Result {
	return func(s *State, now int64, b *T) (r Result) {
		r.Reply, r.Err = f(s, now, b)
		return r
	}
}

// applyChange adapts a State method that replies and may change keys.
func applyChange[T any](f func(*State, int64, *T) (any, []schema.Event, error)) func(*State, int64, *T) Result {
	return func(s *State, now int64, b *T) (r Result) {
		r.Reply, r.Events, r.Err = f(s, now, b)
		return r
	}
}

// opByBody finds a body's command type: the table read backwards.
var opByBody = func() map[reflect.Type]Op {
	m := make(map[reflect.Type]Op, len(ops))
	for i := range ops {
		if ops[i].body != nil {
			m[ops[i].body] = Op(i)
		}
	}
	return m
}()

// spec returns the table entry of a command type, or nil for a number that
// is no command.
func (o Op) spec() *opSpec {
	if int(o) < len(ops) && ops[o].body != nil {
		return &ops[o]
	}
	return nil
}

// opOfBody returns the command type whose body body is, and false for a
// value that is no command's body.
func opOfBody(body any) (Op, bool) {
	op, ok := opByBody[reflect.TypeOf(body)]
	return op, ok
}

func (o Op) String() string {
	if s := o.spec(); s != nil {
		return s.name
	}
	return fmt.Sprintf("op(%d)", byte(o))
}

// mutates reports whether idempotency keys cover a command type: every
// client request, all of which may change the state.
func mutates(op Op) bool {
	s := op.spec()
	return s != nil && s.keys == keyRemembered
}
