package fsm

import (
	"encoding/json"
	"fmt"

	"github.com/concord-io/concord/schema"
)

// Target is what a compare reads from a key.
type Target byte

// Compare targets. The numbers are part of the log format.
const (
	TargetExists         Target = 1
	TargetValue          Target = 2
	TargetField          Target = 3
	TargetVersion        Target = 4
	TargetCreateRevision Target = 5
	TargetModRevision    Target = 6
	TargetLease          Target = 7
	TargetTTL            Target = 8
)

// CompareOp is a compare's operator.
type CompareOp byte

// Compare operators. The numbers are part of the log format.
const (
	CmpEq CompareOp = 1
	CmpNe CompareOp = 2
	CmpLt CompareOp = 3
	CmpLe CompareOp = 4
	CmpGt CompareOp = 5
	CmpGe CompareOp = 6
)

// Compare is one condition of a transaction, evaluated against the state
// before the transaction. An absent key reads as exists=false, value=null,
// version/create_revision/mod_revision/lease/ttl=0.
type Compare struct {
	Key    string
	Target Target
	Op     CompareOp
	// Path is the JSON Pointer of a field compare.
	Path string
	// Value is the JSON operand of value and field compares.
	Value json.RawMessage
	// Int is the operand of the integer targets; exists uses 1 for true.
	Int int64
}

// TxnOp is one operation of a transaction branch: exactly one of Put, Get
// and Delete is set.
type TxnOp struct {
	Put    *Put
	Get    *GetQuery
	Delete *Delete
}

// Txn compares, then runs the success or the failure branch, atomically at
// one revision.
type Txn struct {
	Compare []Compare
	Success []TxnOp
	Failure []TxnOp
}

// MarkDeletes marks every delete of the transaction as a transaction's
// (Delete.ByTxn), so that its tombstones say "txn". A leader does it once
// every member reads LogFormatTxnCause.
func (t *Txn) MarkDeletes() {
	for _, branch := range [][]TxnOp{t.Success, t.Failure} {
		for i := range branch {
			if d := branch[i].Delete; d != nil {
				d.ByTxn = true
			}
		}
	}
}

// unmarked returns the transaction with no delete marked: t itself when
// none is, else a copy.
func (t *Txn) unmarked() *Txn {
	marked := false
	for _, branch := range [][]TxnOp{t.Success, t.Failure} {
		for _, op := range branch {
			marked = marked || (op.Delete != nil && op.Delete.ByTxn)
		}
	}
	if !marked {
		return t
	}
	c := *t
	for _, branch := range []*[]TxnOp{&c.Success, &c.Failure} {
		ops := append([]TxnOp(nil), *branch...)
		for i := range ops {
			if d := ops[i].Delete; d != nil && d.ByTxn {
				u := *d
				u.ByTxn = false
				ops[i].Delete = &u
			}
		}
		*branch = ops
	}
	return &c
}

// txn applies a transaction. The branch runs on a copy-on-write stage of
// the state, so an operation that fails leaves nothing behind, and later
// operations read what earlier ones wrote. A branch that changes anything
// advances the revision once; every written key and every event carries it.
func (s *State) txn(now int64, t *Txn) (any, []schema.Event, error) {
	succeeded := true
	for i := range t.Compare {
		if !s.compare(now, &t.Compare[i]) {
			succeeded = false
			break
		}
	}
	branch, name := t.Success, "success"
	if !succeeded {
		branch, name = t.Failure, "failure"
	}
	stage := s.stage()
	rev := s.revision + 1
	mutated := false
	var events []schema.Event
	responses := make([]schema.TxnResponse, len(branch))
	for i, op := range branch {
		switch {
		case op.Put != nil:
			r, ev, err := stage.putAt(now, rev, op.Put)
			if err != nil {
				return nil, nil, fmt.Errorf("%s operation %d: %w", name, i, err)
			}
			ev.OpIndex = len(events)
			events = append(events, ev)
			responses[i].Put = r
			mutated = true
		case op.Get != nil:
			responses[i].Get = stage.Get(*op.Get, now)
		case op.Delete != nil:
			victims, err := stage.victims(op.Delete)
			if err != nil {
				return nil, nil, fmt.Errorf("%s operation %d: %w", name, i, err)
			}
			r, evs := stage.deleteAt(now, rev, op.Delete, victims, len(events))
			events = append(events, evs...)
			responses[i].Delete = r
			mutated = mutated || len(evs) > 0
		default:
			return nil, nil, fmt.Errorf("%w: %s operation %d is empty", ErrBadCommand, name, i)
		}
	}
	final := s.revision
	if mutated {
		final = rev
		stage.revision = rev
		*s = *stage
		s.spaces[s.name] = s.space
	}
	// Every response reports the revision the transaction left behind.
	for i := range responses {
		switch r := &responses[i]; {
		case r.Put != nil:
			r.Put.Revision = final
		case r.Get != nil:
			r.Get.Revision = final
		case r.Delete != nil:
			r.Delete.Revision = final
		}
	}
	return &schema.KVTxnReply{Succeeded: succeeded, Revision: final, Responses: responses}, events, nil
}

// stage returns a copy of the state whose trees are copy-on-write clones:
// changes to the copy leave s untouched until the copy replaces it.
func (s *State) stage() *State {
	c := *s
	sp := *s.space
	sp.kv = s.kv.Clone()
	sp.leases = s.leases.Clone()
	sp.attached = s.attached.Clone()
	sp.expiry = s.expiry.Clone()
	c.space = &sp
	return &c
}

// compare evaluates one condition against the current state.
func (s *State) compare(now int64, c *Compare) bool {
	r := s.getRecord(c.Key)
	switch c.Target {
	case TargetExists:
		return compareInts(c.Op, boolInt(r != nil), c.Int)
	case TargetValue:
		v := json.RawMessage("null")
		if r != nil {
			v = r.value
		}
		return compareJSON(c.Op, v, c.Value)
	case TargetField:
		v := json.RawMessage("null")
		if r != nil {
			v = r.value
		}
		return compareJSON(c.Op, jsonPointer(v, c.Path), c.Value)
	}
	var n int64
	if r != nil {
		switch c.Target {
		case TargetVersion:
			n = r.version
		case TargetCreateRevision:
			n = r.createRevision
		case TargetModRevision:
			n = r.modRevision
		case TargetLease:
			n = r.lease
		case TargetTTL:
			if l := s.getLease(r.lease); l != nil {
				n = remainingMS(l, now) / 1000
			}
		}
	}
	return compareInts(c.Op, n, c.Int)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func compareInts(op CompareOp, a, b int64) bool {
	switch op {
	case CmpEq:
		return a == b
	case CmpNe:
		return a != b
	case CmpLt:
		return a < b
	case CmpLe:
		return a <= b
	case CmpGt:
		return a > b
	case CmpGe:
		return a >= b
	}
	return false
}

func (w encoder) txn(t *Txn) encoder {
	w.uvarint(uint64(len(t.Compare)))
	for _, c := range t.Compare {
		w.bytes([]byte(c.Key))
		w.buf = append(w.buf, byte(c.Target), byte(c.Op))
		w.bytes([]byte(c.Path))
		w.bytes(c.Value)
		w.varint(c.Int)
	}
	for _, branch := range [][]TxnOp{t.Success, t.Failure} {
		w.uvarint(uint64(len(branch)))
		for _, op := range branch {
			switch {
			case op.Put != nil:
				w.buf = append(w.buf, byte(OpPut))
				w = w.put(op.Put)
			case op.Delete != nil:
				w.buf = append(w.buf, byte(OpDelete))
				w = w.delete(op.Delete)
			case op.Get != nil:
				w.buf = append(w.buf, opGet)
				g := op.Get
				w.bytes([]byte(g.Key))
				w.flags(g.IsPrefix, g.KeysOnly, g.CountOnly)
				w.bytes([]byte(g.After))
				w.varint(int64(g.Limit))
				w.varint(int64(g.MaxBytes))
			default:
				w.buf = append(w.buf, 0)
			}
		}
	}
	return w
}

// opGet marks a get inside a transaction; it is not a command of its own.
const opGet = 100

func (d decoder) txn() (*Txn, decoder) {
	t := &Txn{}
	if n := d.count(); n > 0 {
		t.Compare = make([]Compare, n)
		for i := range t.Compare {
			c := &t.Compare[i]
			c.Key = string(d.bytes())
			c.Target, c.Op = Target(d.byte()), CompareOp(d.byte())
			if c.Target < TargetExists || c.Target > TargetTTL || c.Op < CmpEq || c.Op > CmpGe {
				d.fail(fmt.Sprintf("compare target %d or operator %d", c.Target, c.Op))
			}
			c.Path = string(d.bytes())
			c.Value = d.json()
			c.Int = d.varint()
		}
	}
	for _, branch := range []*[]TxnOp{&t.Success, &t.Failure} {
		n := d.count()
		if n == 0 {
			continue
		}
		*branch = make([]TxnOp, n)
		for i := range *branch {
			op := &(*branch)[i]
			switch kind := d.byte(); kind {
			case byte(OpPut):
				op.Put, d = d.put()
			case byte(OpDelete):
				op.Delete, d = d.delete()
			case opGet:
				g := &GetQuery{Key: string(d.bytes())}
				f := d.flags()
				g.IsPrefix, g.KeysOnly, g.CountOnly = f&1 != 0, f&2 != 0, f&4 != 0
				g.After = string(d.bytes())
				g.Limit, g.MaxBytes = int(d.varint()), int(d.varint())
				op.Get = g
			default:
				d.fail(fmt.Sprintf("transaction operation kind %d", kind))
			}
		}
	}
	return t, d
}

func (d *decoder) byte() byte { return d.flags() }
