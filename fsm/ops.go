package fsm

import (
	"fmt"
	"reflect"
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
// type. The functions take the body as any; opEntry builds them from
// typed ones.
type opSpec struct {
	name string
	keys keyRule
	// body is the type of the command's body, a pointer to its struct.
	body reflect.Type
	// encode appends the body to an entry; decode reads it back.
	encode func(w *encoder, body any)
	decode func(r *decoder) any
	// apply sets r's Reply, Events, Expired or Err.
	apply func(s *State, now int64, body any, r *Result)
}

// ops is the command set, indexed by Op.
var ops = [...]opSpec{
	OpGrant: opEntry("grant", keyRemembered,
		func(w *encoder, b *Grant) {
			w.varint(b.ID)
			w.varint(b.TTL)
			w.bytes(b.Metadata)
		},
		func(r *decoder) *Grant { return &Grant{ID: r.varint(), TTL: r.varint(), Metadata: r.json()} },
		func(s *State, now int64, b *Grant, r *Result) { r.Reply, r.Err = s.grant(now, b) }),

	OpKeepAlive: opEntry("keepalive", keyRemembered,
		func(w *encoder, b *KeepAlive) {
			w.varint(b.ID)
			w.varint(b.TTL)
		},
		func(r *decoder) *KeepAlive { return &KeepAlive{ID: r.varint(), TTL: r.varint()} },
		func(s *State, now int64, b *KeepAlive, r *Result) { r.Reply, r.Err = s.keepAlive(now, b) }),

	OpRevoke: opEntry("revoke", keyRemembered,
		func(w *encoder, b *Revoke) { w.varint(b.ID) },
		func(r *decoder) *Revoke { return &Revoke{ID: r.varint()} },
		func(s *State, _ int64, b *Revoke, r *Result) { r.Reply, r.Events, r.Err = s.revoke(b) }),

	OpPut: opEntry("put", keyRemembered, (*encoder).put, (*decoder).put,
		func(s *State, now int64, b *Put, r *Result) { r.Reply, r.Events, r.Err = s.put(now, b) }),

	OpDelete: opEntry("delete", keyRemembered, (*encoder).delete, (*decoder).delete,
		func(s *State, now int64, b *Delete, r *Result) { r.Reply, r.Events, r.Err = s.delete(now, b) }),

	OpExpire: opEntry("expire", keyIgnored,
		func(w *encoder, b *Expire) { w.ids(b.IDs) },
		func(r *decoder) *Expire { return &Expire{IDs: r.ids()} },
		func(s *State, now int64, b *Expire, r *Result) { r.Events, r.Expired = s.expire(now, b) }),

	OpSetLimits: opEntry("set_limits", keyIgnored,
		func(w *encoder, b *Limits) {
			w.varint(b.MaxLeases)
			w.varint(b.MaxKeysPerLease)
			w.varint(b.IdempotencyEntries)
			w.varint(b.IdempotencyRevisions)
			w.varint(b.ChangesMax)
			w.varint(b.ChangesMaxAgeMS)
		},
		func(r *decoder) *Limits {
			// Later fields were added over time; an entry written before
			// them ends early and takes the defaults.
			l := &Limits{MaxLeases: r.varint(), MaxKeysPerLease: r.varint()}
			if len(r.buf) > 0 {
				l.IdempotencyEntries, l.IdempotencyRevisions = r.varint(), r.varint()
			}
			if len(r.buf) > 0 {
				l.ChangesMax, l.ChangesMaxAgeMS = r.varint(), r.varint()
			}
			return l
		},
		func(s *State, _ int64, b *Limits, _ *Result) { s.limits = b.withDefaults() }),

	OpTxn: opEntry("txn", keyRemembered, (*encoder).txn, (*decoder).txn,
		func(s *State, now int64, b *Txn, r *Result) { r.Reply, r.Events, r.Err = s.txn(now, b) }),

	OpKeepAliveMany: opEntry("keepalive_many", keyRemembered,
		func(w *encoder, b *KeepAliveMany) { w.ids(b.IDs) },
		func(r *decoder) *KeepAliveMany { return &KeepAliveMany{IDs: r.ids()} },
		func(s *State, now int64, b *KeepAliveMany, r *Result) { r.Reply = s.keepAliveMany(now, b) }),
}

// opEntry builds a table entry from functions typed for the body *T.
func opEntry[T any](name string, keys keyRule, encode func(*encoder, *T), decode func(*decoder) *T,
	apply func(*State, int64, *T, *Result)) opSpec {
	return opSpec{
		name:   name,
		keys:   keys,
		body:   reflect.TypeFor[*T](),
		encode: func(w *encoder, body any) { encode(w, body.(*T)) },
		decode: func(r *decoder) any { return decode(r) },
		apply:  func(s *State, now int64, body any, r *Result) { apply(s, now, body.(*T), r) },
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
