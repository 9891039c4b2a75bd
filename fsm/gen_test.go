package fsm

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"strings"

	"github.com/concord-io/concord/schema"
)

// cmdGen produces a random but seeded stream of log entries that mixes every
// command, transactions and KeepAliveMany included, with plenty of failing
// ones (unknown and anonymous leases, conflicts, taken ids, limits, prefix
// deletes over their limit, reused idempotency keys) and some undecodable
// entries. Its limits sometimes keep the change log small, by count or by
// age, so revisions are trimmed from it. About one
// command in six carries an idempotency key, and some are retries of
// earlier keyed commands. It looks at a
// state (the one under test, or a shadow) to pick lease ids that exist most
// of the time, so the stream exercises real attachments and expiries.
type cmdGen struct {
	r    *rand.Rand
	now  int64
	keys []string
	// keyed remembers recent commands sent with an idempotency key, so
	// that later entries retry them, with the same body (a cache hit,
	// unless the entry was evicted or the command failed) or with another
	// (a conflict while the entry lives).
	keyed   []keyedBody
	nextKey int
	// tenants are the tenants commands are sent for (genTenants, or the
	// default one alone); tr picks each command's, apart from r so that
	// a tenant choice does not shift the rest of the stream.
	tenants []string
	tr      *rand.Rand
	// imported counts the chunks of tenant MOVED-IN imported so far; -1
	// once it is activated.
	imported int
}

// genTenants are the tenants commands are sent for: the default one most
// of the time, and two others whose names sort on either side of nothing
// in particular, using the same keys and lease ids.
var genTenants = []string{DefaultTenant, DefaultTenant, DefaultTenant, "acc-A", "ACC_B"}

type keyedBody struct {
	key    string
	body   any
	tenant string
}

func newCmdGen(seed int64) *cmdGen {
	g := &cmdGen{imported: 0, r: rand.New(rand.NewSource(seed)), tr: rand.New(rand.NewSource(^seed)), now: 1_000_000,
		tenants: []string{DefaultTenant}}
	tokens := []string{"a", "b", "svc", "x-1", "Z"}
	for _, t1 := range tokens {
		g.keys = append(g.keys, t1)
		for _, t2 := range tokens[:3] {
			g.keys = append(g.keys, t1+"."+t2)
			g.keys = append(g.keys, t1+"."+t2+".n"+t2)
		}
	}
	return g
}

// prefixes are delete/get prefixes, including "" (everything).
var genPrefixes = []string{"", "a", "a.", "svc.", "svc.b", "x", "Z.a.", "q"}

func (g *cmdGen) key() string { return g.keys[g.r.Intn(len(g.keys))] }

// leaseID picks a lease id: mostly one that exists in s, sometimes any id
// (possibly gone, anonymous or never granted).
func (g *cmdGen) leaseID(s *State) int64 {
	if g.r.Intn(10) < 7 {
		list := s.LeaseList(g.r.Intn(4) == 0, 0, math.MaxInt, s.Now()).Leases
		if len(list) > 0 {
			return list[g.r.Intn(len(list))].ID
		}
	}
	return 1 + g.r.Int63n(s.nextLeaseID+3)
}

func (g *cmdGen) ttl() int64 { return 1 + g.r.Int63n(6) }

func (g *cmdGen) value() json.RawMessage {
	switch g.r.Intn(5) {
	case 0:
		return json.RawMessage(fmt.Sprintf("%d", g.r.Intn(1000)))
	case 1:
		return json.RawMessage(fmt.Sprintf(`{"addr":"10.0.0.%d","tags":["<&>",%v]}`, g.r.Intn(256), g.r.Intn(2) == 0))
	case 2:
		return json.RawMessage(`"` + strings.Repeat("v", g.r.Intn(40)) + `"`)
	case 3:
		return json.RawMessage(`null`)
	}
	return json.RawMessage(`[1,2.5,"é\u00e9"]`)
}

// next returns the next entry, stamped with the generator's clock; about one
// in twenty is stamped earlier than the clock, as concurrent proposals are.
func (g *cmdGen) next(all *State) []byte {
	// The body is made from what the tenant sees: its lease ids, its
	// expired leases.
	tenant := g.tenants[g.tr.Intn(len(g.tenants))]
	s := all.In(tenant)
	g.now += int64(g.r.Intn(400))
	if g.r.Intn(100) == 0 {
		g.now += 10_000 // a pause: many leases expire at once
	}
	now := g.now
	if g.r.Intn(20) == 0 {
		now -= int64(g.r.Intn(3_000))
	}
	var body any
	switch p := g.r.Intn(100); {
	case p < 11:
		gr := &Grant{TTL: g.ttl()}
		switch g.r.Intn(8) {
		case 0:
			gr.ID = g.leaseID(s) // mostly taken
		case 1:
			gr.ID = s.nextLeaseID + g.r.Int63n(5) // ahead of the counter
		}
		if g.r.Intn(4) == 0 {
			gr.Metadata = json.RawMessage(fmt.Sprintf(`{"owner":"o%d"}`, g.r.Intn(9)))
		}
		body = gr
	case p < 21:
		k := &KeepAlive{ID: g.leaseID(s)}
		if g.r.Intn(3) == 0 {
			k.TTL = g.ttl()
		}
		body = k
	case p < 25:
		// Live, anonymous and unknown ids, sometimes none, sometimes one
		// listed twice.
		k := &KeepAliveMany{}
		for i := g.r.Intn(6); i > 0; i-- {
			k.IDs = append(k.IDs, g.leaseID(s))
		}
		if len(k.IDs) > 0 && g.r.Intn(5) == 0 {
			k.IDs = append(k.IDs, k.IDs[g.r.Intn(len(k.IDs))])
		}
		body = k
	case p < 29:
		body = &Revoke{ID: g.leaseID(s)}
	case p < 60:
		body = g.put(s)
	case p < 69:
		body = g.delete(false)
	case p < 78:
		body = g.txn(s)
	case p < 90:
		// What a leader's ticker proposes, plus noise: live and unknown ids.
		e := &Expire{IDs: s.Expired(now, 1+g.r.Intn(50))}
		for i := g.r.Intn(3); i > 0; i-- {
			e.IDs = append(e.IDs, g.leaseID(s))
		}
		body = e
	case p < 93:
		body = &Expire{}
	case p < 94:
		// An operator's compaction: mostly within the history, sometimes
		// below the floor (a no-op) or in the future (refused).
		body = &Compact{Revision: s.Revision() - int64(g.r.Intn(40)) + 2}
	case p < 97:
		l := &Limits{MaxLeases: 5 + g.r.Int63n(40), MaxKeysPerLease: 1 + g.r.Int63n(8)}
		if g.r.Intn(2) == 0 {
			// Small enough that entries are evicted by count and by age.
			l.IdempotencyEntries, l.IdempotencyRevisions = 2+g.r.Int63n(30), 5+g.r.Int63n(100)
		}
		// A change log small enough that revisions go by count, by age,
		// or both; otherwise the defaults.
		switch g.r.Intn(4) {
		case 0:
			l.HistoryRevisions = 1 + g.r.Int63n(80)
		case 1:
			l.HistoryAgeMS = 500 + g.r.Int63n(20_000)
		case 2:
			l.HistoryRevisions, l.HistoryAgeMS = 1+g.r.Int63n(80), 500+g.r.Int63n(20_000)
		}
		body = l
		tenant = DefaultTenant // the cluster's, set by the operator
	default:
		return g.bad(now)
	}
	if len(g.tenants) > 1 && g.tr.Intn(80) == 0 {
		// An operator sets or clears a tenant's quota, or the default
		// one: small enough that the tenants run into them.
		q := &SetQuota{Tenant: g.tenants[len(g.tenants)-1-g.tr.Intn(2)], Clear: g.tr.Intn(4) == 0,
			Quota: Quota{Leases: g.tr.Int63n(8), Keys: g.tr.Int63n(12), ValueBytes: g.tr.Int63n(400), KeepAliveMany: g.tr.Int63n(4)}}
		if g.tr.Intn(3) == 0 {
			q.Tenant = QuotaDefault
		}
		body, tenant = q, DefaultTenant
	}
	if len(g.tenants) > 1 && g.tr.Intn(60) == 0 {
		body, tenant = g.move(all, now), DefaultTenant
	}
	key := ""
	switch x := g.r.Intn(100); {
	case x < 9 && len(g.keyed) > 0:
		// A retry of a recent keyed command: mostly the same request, the
		// rest of the time the new body under the old key.
		k := g.keyed[len(g.keyed)-1-g.r.Intn(min(len(g.keyed), 40))]
		key = k.key
		if g.r.Intn(3) > 0 {
			body = k.body
		}
		// Mostly the tenant that sent it; otherwise another tenant's
		// request under the same key, which is a key of its own.
		if g.tr.Intn(4) > 0 {
			tenant = k.tenant
		}
	case x < 26:
		// A new key (Expire and SetLimits ignore theirs).
		key = fmt.Sprintf("c%d:req-%d", g.r.Intn(5), g.nextKey)
		g.nextKey++
		g.keyed = append(g.keyed, keyedBody{key, body, tenant})
		if len(g.keyed) > 200 {
			g.keyed = g.keyed[100:]
		}
	}
	data, err := EncodeFor(now, tenant, key, body)
	if err != nil {
		panic(err)
	}
	return data
}

// move returns a step of a move: a tenant fenced, or its fence lifted, or
// a chunk of tenant MOVED-IN imported, or MOVED-IN activated.
func (g *cmdGen) move(s *State, now int64) *TenantMove {
	if g.imported >= 0 && g.tr.Intn(2) == 0 {
		if g.imported == 4 {
			g.imported = -1
			return &TenantMove{Tenant: "MOVED-IN", Phase: MoveActivate, NextLeaseID: 10}
		}
		g.imported++
		id := int64(g.imported)
		return &TenantMove{Tenant: "MOVED-IN", Phase: MoveImport,
			Leases: []MovedLease{{ID: id, TTL: 1 + g.tr.Int63n(5), RemainingMS: g.tr.Int63n(5000), Anonymous: id == 3}},
			Keys:   []MovedKey{{Key: fmt.Sprintf("in.%d", id), Value: g.value(), Version: 1 + g.tr.Int63n(3), Lease: id}}}
	}
	tenant := g.tenants[len(g.tenants)-1-g.tr.Intn(2)]
	if sp := s.spaces[tenant]; sp != nil && sp.status == tenantMoving {
		return &TenantMove{Tenant: tenant, Phase: MoveAbort}
	}
	return &TenantMove{Tenant: tenant, Phase: MoveFence, To: "elsewhere"}
}

// bad returns an entry that does not decode.
func (g *cmdGen) bad(now int64) []byte {
	data, _ := Encode(now, &Revoke{ID: 1})
	switch g.r.Intn(6) {
	case 0:
		return data[:g.r.Intn(len(data))]
	case 1:
		data[0] = 9
	case 2:
		data[1] = 0
	case 3:
		// A truncated keyed transaction.
		t, _ := EncodeKeyed(now, "k", &Txn{
			Compare: []Compare{{Key: "a", Target: TargetValue, Op: CmpEq, Value: json.RawMessage(`{"x":1}`)}},
			Success: []TxnOp{{Put: &Put{Key: "a", Value: json.RawMessage(`1`)}}, {Get: &GetQuery{Key: "a"}}},
		})
		return t[:g.r.Intn(len(t))]
	case 4:
		// A transaction operation of an unknown kind.
		t, _ := Encode(now, &Txn{Success: []TxnOp{{Delete: &Delete{Key: "a"}}}})
		t[headerLen+2] = 77
		return t
	default:
		data = append(data, 0) // trailing bytes
	}
	return data
}

func (g *cmdGen) put(s *State) *Put {
	pt := &Put{Key: g.key(), Value: g.value(), PrevKV: g.r.Intn(3) == 0}
	switch g.r.Intn(10) {
	case 0, 1, 2, 3:
		pt.Lease = g.leaseID(s)
	case 4, 5, 6:
		pt.TTL = g.ttl()
	}
	if g.r.Intn(5) == 0 {
		pt.ContentType = []string{"", "application/json", "text/plain; charset=utf-8"}[g.r.Intn(3)]
		pt.Metadata = []json.RawMessage{nil, json.RawMessage(`{"owner":"o1"}`), json.RawMessage(`{}`)}[g.r.Intn(3)]
	}
	return pt
}

// delete returns a delete of one key or of a prefix; inside a transaction
// a prefix delete may carry a limit, sometimes smaller than its matches.
func (g *cmdGen) delete(inTxn bool) *Delete {
	d := &Delete{Key: g.key(), PrevKV: g.r.Intn(2) == 0}
	// Marked or not, as a leader before and after every member reads
	// LogFormatTxnCause.
	d.ByTxn = inTxn && g.r.Intn(2) == 0
	if inTxn && g.r.Intn(2) == 0 {
		d.Key, d.IsPrefix = genPrefixes[g.r.Intn(len(genPrefixes))], true
		if g.r.Intn(3) > 0 {
			d.Limit = 1 + g.r.Int63n(3)
		}
	} else if g.r.Intn(3) == 0 {
		d.Key, d.IsPrefix = genPrefixes[g.r.Intn(len(genPrefixes))], true
		if g.r.Intn(4) == 0 {
			// A range instead, sometimes to the end of the keyspace.
			d.IsPrefix, d.IsRange = false, true
			if g.r.Intn(3) > 0 {
				d.RangeEnd = genPrefixes[g.r.Intn(len(genPrefixes))]
			}
		}
	}
	return d
}

// genPaths are field-compare pointers into the generator's values.
var genPaths = []string{"", "/addr", "/tags/0", "/tags/1", "/tags/2", "/0", "/1", "/2", "/nope", "/addr/x"}

// genOperands are field-compare operands that the generator's values hold
// some of the time.
var genOperands = []string{`"10.0.0.7"`, `"<&>"`, `true`, `false`, `null`, `1`, `2.5`, `2.50`, `"éé"`, `"10.0.0.200"`, `500`}

// compare returns a compare of a random target and operator whose operand
// is often near what the state holds, so both branches get taken.
func (g *cmdGen) compare(s *State) Compare {
	c := Compare{Key: g.key(), Target: Target(1 + g.r.Intn(8)), Op: CompareOp(1 + g.r.Intn(6))}
	if g.r.Intn(2) == 0 {
		c.Op = CmpEq + CompareOp(g.r.Intn(2)) // == and != most
	}
	kvs := s.Get(GetQuery{Key: c.Key}, s.Now()).KVs
	switch c.Target {
	case TargetValue:
		if len(kvs) > 0 && g.r.Intn(2) == 0 {
			c.Value = kvs[0].Value
		} else {
			c.Value = g.value()
		}
		return c
	case TargetField:
		c.Path = genPaths[g.r.Intn(len(genPaths))]
		c.Value = json.RawMessage(genOperands[g.r.Intn(len(genOperands))])
		if len(kvs) > 0 && g.r.Intn(3) == 0 {
			c.Value = jsonPointer(kvs[0].Value, c.Path)
		}
		return c
	}
	var kv *schema.KeyValue
	if len(kvs) > 0 {
		kv = &kvs[0]
	}
	n := modelInt(kv, c.Target)
	if g.r.Intn(3) > 0 {
		n += int64(g.r.Intn(3) - 1)
	}
	c.Int = n
	return c
}

// txn returns a transaction of up to three compares and two branches of up
// to four operations each, mixing puts, gets and deletes.
func (g *cmdGen) txn(s *State) *Txn {
	t := &Txn{}
	for i := g.r.Intn(4); i > 0; i-- {
		t.Compare = append(t.Compare, g.compare(s))
	}
	t.Success, t.Failure = g.branch(s), g.branch(s)
	return t
}

func (g *cmdGen) branch(s *State) []TxnOp {
	n := g.r.Intn(5)
	if n == 0 {
		return nil
	}
	ops := make([]TxnOp, n)
	for i := range ops {
		switch p := g.r.Intn(10); {
		case p < 5:
			pt := g.put(s)
			if pt.Lease != 0 && g.r.Intn(2) == 0 {
				pt.Lease = 0 // fewer bad leases, so more transactions apply
			}
			ops[i].Put = pt
		case p < 7:
			q := &GetQuery{Key: g.key(), KeysOnly: g.r.Intn(5) == 0, CountOnly: g.r.Intn(8) == 0}
			if g.r.Intn(2) == 0 {
				q.Key, q.IsPrefix, q.Limit = genPrefixes[g.r.Intn(len(genPrefixes))], true, 1+g.r.Intn(20)
				if g.r.Intn(4) == 0 {
					q.After = g.key()
				}
			}
			ops[i].Get = q
		default:
			ops[i].Delete = g.delete(true)
		}
	}
	return ops
}

// genLog generates n entries against a shadow state, so that the ids it
// picks are realistic, and returns them with the shadow.
func genLog(seed int64, n int) ([][]byte, *State) {
	return genLogOf(newCmdGen(seed), n)
}

// genTenantLog is genLog with commands of three tenants (genTenants).
func genTenantLog(seed int64, n int) ([][]byte, *State) {
	g := newCmdGen(seed)
	g.tenants = genTenants
	return genLogOf(g, n)
}

func genLogOf(g *cmdGen, n int) ([][]byte, *State) {
	shadow := New()
	log := make([][]byte, n)
	for i := range log {
		log[i] = g.next(shadow)
		shadow.Apply(log[i])
	}
	return log, shadow
}
