package decode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

var compareTargets = map[string]fsm.Target{
	schema.TargetExists:         fsm.TargetExists,
	schema.TargetValue:          fsm.TargetValue,
	schema.TargetField:          fsm.TargetField,
	schema.TargetVersion:        fsm.TargetVersion,
	schema.TargetCreateRevision: fsm.TargetCreateRevision,
	schema.TargetModRevision:    fsm.TargetModRevision,
	schema.TargetLease:          fsm.TargetLease,
	schema.TargetTTL:            fsm.TargetTTL,
}

var compareOps = map[string]fsm.CompareOp{
	"==": fsm.CmpEq, "!=": fsm.CmpNe, "<": fsm.CmpLt, "<=": fsm.CmpLe, ">": fsm.CmpGt, ">=": fsm.CmpGe,
}

// Txn checks a transaction request: sizes and counts, every compare's
// target, operator and operand type, and every operation as its standalone
// endpoint would. Only what depends on state is left to Apply.
func (d *Decoder) Txn(data []byte) (*fsm.Txn, string, *schema.Error) {
	if len(data) > d.maxTxnBytes {
		return nil, "", tooLarge("the transaction", len(data), d.maxTxnBytes)
	}
	var req schema.KVTxnRequest
	if e := Strict(data, &req); e != nil {
		return nil, "", e
	}
	if len(req.Compare) > d.maxTxnCompares {
		return nil, "", Invalid("compare has %d compares, more than the %d allowed", len(req.Compare), d.maxTxnCompares)
	}
	t := &fsm.Txn{Compare: make([]fsm.Compare, 0, len(req.Compare))}
	seen := make(map[string]bool, len(req.Compare))
	for i, c := range req.Compare {
		at := fmt.Sprintf("compare[%d].", i)
		fc, e := d.buildCompare(at, c)
		if e != nil {
			return nil, "", e
		}
		id := c.Key + "\x00" + c.Target + "\x00" + fc.Path
		if seen[id] {
			return nil, "", Invalid("%s is a second %s compare of key %q: combine them into one", at[:len(at)-1], c.Target, c.Key)
		}
		seen[id] = true
		t.Compare = append(t.Compare, fc)
	}
	// Reads in the reply share what is left of the max payload.
	gets := 0
	for _, branch := range [][]schema.TxnOp{req.Success, req.Failure} {
		for _, op := range branch {
			if op.Get != nil {
				gets++
			}
		}
	}
	budget := d.replyBytes
	if gets > 0 {
		budget /= gets
	}
	var e *schema.Error
	if t.Success, e = d.buildBranch("success", req.Success, budget); e != nil {
		return nil, "", e
	}
	if t.Failure, e = d.buildBranch("failure", req.Failure, budget); e != nil {
		return nil, "", e
	}
	return t, req.IdempotencyKey, nil
}

func (d *Decoder) buildCompare(at string, c schema.TxnCompare) (fsm.Compare, *schema.Error) {
	if e := d.checkKey(at+"key", c.Key); e != nil {
		return fsm.Compare{}, e
	}
	target, ok := compareTargets[c.Target]
	if !ok {
		return fsm.Compare{}, Invalid("%starget must be one of exists, value, field, version, create_revision, mod_revision, lease and ttl, not %q", at, c.Target)
	}
	op, ok := compareOps[c.Op]
	if !ok {
		return fsm.Compare{}, Invalid("%sop must be one of ==, !=, <, <=, > and >=, not %q", at, c.Op)
	}
	if (target == fsm.TargetExists || target == fsm.TargetValue || target == fsm.TargetLease) && op != fsm.CmpEq && op != fsm.CmpNe {
		return fsm.Compare{}, Invalid("%sop must be == or != in %s compare, not %s", at, article(c.Target), c.Op)
	}
	if c.Path != nil && target != fsm.TargetField {
		return fsm.Compare{}, Invalid("%spath applies only to a field compare, not to %s compare", at, article(c.Target))
	}
	if len(c.Value) == 0 {
		return fsm.Compare{}, Invalid("%svalue is required: what the %s is compared with", at, c.Target)
	}
	fc := fsm.Compare{Key: c.Key, Target: target, Op: op}
	switch target {
	case fsm.TargetValue, fsm.TargetField:
		fc.Value = compactJSON(c.Value)
		if len(fc.Value) > d.maxValueBytes {
			return fsm.Compare{}, tooLarge(at+"value", len(fc.Value), d.maxValueBytes)
		}
		if target == fsm.TargetField {
			if c.Path == nil {
				return fsm.Compare{}, Invalid("%spath is required in a field compare: a JSON Pointer such as \"/status\"", at)
			}
			if !fsm.ValidJSONPointer(*c.Path) {
				return fsm.Compare{}, Invalid("%spath must be a JSON Pointer (RFC 6901) such as \"/status\" or \"\", not %q", at, *c.Path)
			}
			fc.Path = *c.Path
		}
	case fsm.TargetExists:
		switch string(bytes.TrimSpace(c.Value)) {
		case "true":
			fc.Int = 1
		case "false":
		default:
			return fsm.Compare{}, Invalid("%svalue must be true or false in an exists compare, not %s", at, shorten(string(bytes.TrimSpace(c.Value))))
		}
	default:
		n, ok := jsonInt(c.Value)
		if !ok {
			return fsm.Compare{}, Invalid("%svalue must be a whole number in %s compare, not %s", at, article(c.Target), shorten(string(bytes.TrimSpace(c.Value))))
		}
		if target == fsm.TargetLease && (n < 0 || n > schema.MaxLeaseID) {
			return fsm.Compare{}, Invalid("%svalue must be a lease id from 1 to %d (or 0 for none), not %d", at, int64(schema.MaxLeaseID), n)
		}
		fc.Int = n
	}
	return fc, nil
}

// jsonInt reads an integer written as a JSON number (1, 1.0 and 1e3 count).
func jsonInt(raw json.RawMessage) (int64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] == '"' { // json.Number would accept "1"
		return 0, false
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, false
	}
	if i, err := n.Int64(); err == nil {
		return i, true
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

func (d *Decoder) buildBranch(name string, ops []schema.TxnOp, getBudget int) ([]fsm.TxnOp, *schema.Error) {
	if len(ops) > d.maxTxnOps {
		return nil, Invalid("%s has %d operations, more than the %d allowed", name, len(ops), d.maxTxnOps)
	}
	out := make([]fsm.TxnOp, 0, len(ops))
	for i, op := range ops {
		at := fmt.Sprintf("%s[%d].", name, i)
		n := 0
		for _, set := range []bool{op.Put != nil, op.Get != nil, op.Delete != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			return nil, Invalid("%s must hold exactly one of put, get and delete", at[:len(at)-1])
		}
		switch {
		case op.Put != nil:
			p := op.Put
			fp, e := d.buildPut(at+"put.", p.Key, p.Value, p.Lease, p.TTL, p.PrevKV)
			if e == nil {
				e = checkPutExtra(at+"put.", fp, p.ContentType, p.Metadata)
			}
			if e != nil {
				return nil, e
			}
			out = append(out, fsm.TxnOp{Put: fp})
		case op.Get != nil:
			g := op.Get
			q, e := d.buildGet(at+"get.", g.Key, g.Prefix, g.Limit, g.After, g.KeysOnly, g.CountOnly, schema.MaxTxnPrefixLimit)
			if e != nil {
				return nil, e
			}
			q.MaxBytes = getBudget
			out = append(out, fsm.TxnOp{Get: &q})
		case op.Delete != nil:
			del := op.Delete
			key, isPrefix, e := d.keyOrPrefix(at+"delete.", del.Key, del.Prefix)
			if e != nil {
				return nil, e
			}
			limit, e := checkLimit(at+"delete.", del.Limit, schema.MaxTxnPrefixLimit)
			if e != nil {
				return nil, e
			}
			out = append(out, fsm.TxnOp{Delete: &fsm.Delete{Key: key, IsPrefix: isPrefix, PrevKV: del.PrevKV, Limit: int64(limit)}})
		}
	}
	return out, nil
}

// article puts "a" or "an" before a compare target: "an exists", "a
// version".
func article(target string) string {
	if target != "" && strings.ContainsRune("aeiou", rune(target[0])) {
		return "an " + target
	}
	return "a " + target
}
