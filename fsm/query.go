package fsm

import (
	"encoding/json"

	"github.com/concord-io/concord/schema"
)

// recordOverhead approximates the JSON bytes a record adds to a reply beyond
// its key and value, for bounding reply size.
const recordOverhead = 160

var emptyObject = json.RawMessage(`{}`)

// GetQuery is a read of one key or of a key range.
type GetQuery struct {
	Key      string
	IsPrefix bool
	// IsRange reads [Key, RangeEnd), RangeEnd "" meaning to the end of the
	// keyspace. Not carried by transactions, whose gets take a key or a
	// prefix.
	IsRange  bool
	RangeEnd string
	// After skips keys up to and including this one (prefix and range
	// reads only).
	After     string
	Limit     int
	KeysOnly  bool
	CountOnly bool
	// MaxBytes bounds the approximate size of the records returned; at least
	// one record is returned whatever its size. 0 means no bound.
	MaxBytes int
	// Into, when not nil, is the slice the reply's records are appended
	// to from length 0: a reader that has sent one page reuses its slice
	// for the next, instead of growing a new one to thousands of records.
	Into []schema.KeyValue
	// Yield, when not nil, is called after every YieldEvery records a
	// prefix or range read walks. Such a read runs on a view beside the
	// writes for milliseconds; the service passes runtime.Gosched, so
	// that the goroutines a write waits on are not held up behind it
	// for a whole scheduler time slice.
	Yield func()
}

// YieldEvery is how many records a read walks between calls of its Yield:
// a fraction of a millisecond's work.
const YieldEvery = 256

// kvs is the empty slice a reply's records go into.
func (q *GetQuery) kvs() []schema.KeyValue {
	if q.Into != nil {
		return q.Into[:0]
	}
	return []schema.KeyValue{}
}

// GetAt answers a read at revision rev, as the keys stood right after it
// committed; 0 means the present, read as Get does. A read at a named
// revision, the current one included, carries no remaining lease time, so
// a listing continued page by page at one revision has one shape even
// while writes go on. Below the floor it fails with
// ErrCompacted, above the current revision with ErrFutureRevision.
func (s *State) GetAt(q GetQuery, rev int64, now int64) (*schema.KVGetReply, error) {
	if rev == 0 {
		return s.Get(q, now), nil
	}
	if err := s.checkReadRevision(rev); err != nil {
		return nil, err
	}
	reply := &schema.KVGetReply{Revision: rev, KVs: q.kvs()}
	if !q.IsPrefix && !q.IsRange {
		if r := s.recordAt(q.Key, rev); r != nil {
			reply.Count = 1
			if !q.CountOnly {
				reply.KVs = append(reply.KVs, historicalKeyValue(r, q.KeysOnly))
			}
		}
		return reply, nil
	}
	sp := spanOf(q.Key, q.IsPrefix, q.IsRange, q.RangeEnd)
	start, end := sp.start, sp.end
	if q.After >= start {
		start = q.After + "\x00"
	}
	p := pager{reply: reply, q: &q}
	render := func(r *record) schema.KeyValue { return historicalKeyValue(r, q.KeysOnly) }
	s.ascendAt(start, end, rev, func(r *record) bool {
		p.add(r, render)
		return true
	})
	return reply, nil
}

// pager fills a listing's reply: it counts every match, and keeps records
// while the limit and the size bound allow, at least one whatever its size;
// once one is left out, More is set and the rest are only counted.
type pager struct {
	reply *schema.KVGetReply
	q     *GetQuery
	size  int
}

func (p *pager) add(r *record, render func(*record) schema.KeyValue) {
	p.reply.Count++
	if p.q.Yield != nil && p.reply.Count%YieldEvery == 0 {
		p.q.Yield()
	}
	if p.q.CountOnly || p.reply.More {
		return
	}
	n := len(r.key) + recordOverhead
	if !p.q.KeysOnly {
		n += len(r.value)
	}
	if len(p.reply.KVs) >= p.q.Limit || (p.q.MaxBytes > 0 && len(p.reply.KVs) > 0 && p.size+n > p.q.MaxBytes) {
		p.reply.More = true
		return
	}
	p.size += n
	p.reply.KVs = append(p.reply.KVs, render(r))
}

// historicalKeyValue renders a record of a past revision: no remaining time.
func historicalKeyValue(r *record, keysOnly bool) schema.KeyValue {
	kv := schema.KeyValue{Key: r.key, CreateRevision: r.createRevision, ModRevision: r.modRevision, Version: r.version, Lease: r.lease}
	if !keysOnly {
		kv.Value = r.value
		kv.ContentType, kv.Metadata = r.contentType(), r.metadata()
	}
	return kv
}

// span is the keys a read, a delete or a change-log read covers: one key,
// or the byte-wise half-open range [start, end), end "" meaning no end.
type span struct {
	start, end string
	single     bool
}

func spanOf(key string, isPrefix, isRange bool, rangeEnd string) span {
	switch {
	case isRange:
		return span{start: key, end: rangeEnd}
	case isPrefix:
		return span{start: key, end: prefixEnd(key)}
	}
	return span{start: key, end: key + "\x00", single: true}
}

func (sp span) contains(key string) bool {
	if sp.single {
		return key == sp.start
	}
	return key >= sp.start && (sp.end == "" || key < sp.end)
}

// past reports whether key lies past the span's end.
func (sp span) past(key string) bool { return sp.end != "" && key >= sp.end }

// prefixEnd returns the smallest key above every key with the prefix, or
// "" when there is none (the prefix is empty or all 0xff bytes).
func prefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}

// Get answers a read; remaining lease time is measured at now.
func (s *State) Get(q GetQuery, now int64) *schema.KVGetReply {
	reply := &schema.KVGetReply{Revision: s.revision, KVs: q.kvs()}
	if !q.IsPrefix && !q.IsRange {
		if r := s.getRecord(q.Key); r != nil {
			reply.Count = 1
			if !q.CountOnly {
				reply.KVs = append(reply.KVs, s.keyValue(r, now, q.KeysOnly))
			}
		}
		return reply
	}
	sp := spanOf(q.Key, q.IsPrefix, q.IsRange, q.RangeEnd)
	start := sp.start
	if q.After >= start {
		start = q.After + "\x00" // the smallest key after q.After
	}
	p := pager{reply: reply, q: &q}
	render := func(r *record) schema.KeyValue { return s.keyValue(r, now, q.KeysOnly) }
	s.kv.AscendGreaterOrEqual(&record{key: start}, func(r *record) bool {
		if sp.past(r.key) {
			return false
		}
		p.add(r, render)
		return true
	})
	return reply
}

// LeaseInfo describes a lease at time now, with its keys when withKeys.
func (s *State) LeaseInfo(id int64, withKeys bool, now int64) (*schema.LeaseInfo, error) {
	l := s.getLease(id)
	if l == nil {
		return nil, errf(ErrLeaseNotFound, "lease %d not found", id)
	}
	info := leaseInfo(l, now)
	if withKeys {
		info.Keys = make([]string, 0, l.keyCount)
		s.attached.AscendRange(attachment{l.id, ""}, attachment{l.id + 1, ""}, func(a attachment) bool {
			info.Keys = append(info.Keys, a.key)
			return true
		})
	}
	return info, nil
}

func leaseInfo(l *lease, now int64) *schema.LeaseInfo {
	ms := remainingMS(l, now)
	md := l.metadata
	if md == nil {
		md = emptyObject
	}
	return &schema.LeaseInfo{
		ID:              l.id,
		TTL:             l.ttl,
		RemainingTTL:    ms / 1000,
		RemainingMS:     ms,
		GrantedRevision: l.grantedRevision,
		Anonymous:       l.anonymous,
		Metadata:        md,
		KeyCount:        l.keyCount,
	}
}

// LeaseList lists leases with ids above after, in id order.
func (s *State) LeaseList(includeAnonymous bool, after int64, limit int, now int64) *schema.LeaseListReply {
	reply := &schema.LeaseListReply{Leases: []schema.LeaseInfo{}}
	s.leases.AscendGreaterOrEqual(&lease{id: after + 1}, func(l *lease) bool {
		if l.anonymous && !includeAnonymous {
			return true
		}
		if len(reply.Leases) >= limit {
			reply.More = true
			return false
		}
		reply.Leases = append(reply.Leases, *leaseInfo(l, now))
		return true
	})
	return reply
}

// Expired returns up to max (0: all) ids of the current tenant's leases
// whose deadline is strictly before now, earliest deadline first.
func (s *State) Expired(now int64, max int) []int64 { return s.space.expired(now, max) }

// expired is Expired of sp.
func (sp *space) expired(now int64, max int) []int64 {
	var ids []int64
	sp.expiry.Ascend(func(e deadlineEntry) bool {
		if e.deadline >= now || (max > 0 && len(ids) >= max) {
			return false
		}
		ids = append(ids, e.id)
		return true
	})
	return ids
}

// NextDeadline returns the earliest lease deadline of every tenant served
// here (a moving tenant's leases are frozen), if there is a lease.
func (s *State) NextDeadline() (next int64, ok bool) {
	s.each(func(sp *space) {
		if sp.status != tenantActive {
			return // frozen while it moves
		}
		if e, has := sp.expiry.Min(); has && (!ok || e.deadline < next) {
			next, ok = e.deadline, true
		}
	})
	return next, ok
}

// DueLeases are the expired leases of one tenant.
type DueLeases struct {
	Tenant string
	IDs    []int64
}

// Due returns, for every tenant with one, the ids of the leases whose
// deadline is strictly before now, earliest deadline first; tenants in
// name order, the default one first.
func (s *State) Due(now int64) []DueLeases {
	var due []DueLeases
	s.each(func(sp *space) {
		if sp.status != tenantActive {
			return
		}
		if ids := sp.expired(now, 0); len(ids) > 0 {
			due = append(due, DueLeases{Tenant: sp.name, IDs: ids})
		}
	})
	return due
}
