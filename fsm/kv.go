package fsm

import (
	"github.com/concord-io/concord/schema"
)

func (s *State) getRecord(key string) *record {
	if s.applying {
		s.pivotRec.key = key
		r, _ := s.kv.Get(&s.pivotRec)
		s.pivotRec.key = ""
		return r
	}
	r, _ := s.kv.Get(&record{key: key})
	return r
}

// attach adds key to lease l, which must not hold it yet.
func (s *State) attach(l *lease, key string) {
	s.attached.ReplaceOrInsert(attachment{l.id, key})
	nl := *l
	nl.keyCount++
	// The deadline is unchanged, so the expiry index needs no update.
	s.leases.ReplaceOrInsert(&nl)
}

// detach removes key from its lease. An anonymous lease exists only for its
// key, so it goes with it.
func (s *State) detach(leaseID int64, key string) {
	s.attached.Delete(attachment{leaseID, key})
	l := s.getLease(leaseID)
	if l == nil {
		return
	}
	if l.anonymous {
		s.dropLease(l)
		return
	}
	nl := *l
	nl.keyCount--
	s.leases.ReplaceOrInsert(&nl)
}

// put applies a put at the next revision.
func (s *State) put(now int64, p *Put) (any, []schema.Event, error) {
	rev := s.revision + 1
	reply, ev, err := s.putAt(now, rev, p)
	if err != nil {
		return nil, nil, err
	}
	s.revision = rev
	return reply, []schema.Event{ev}, nil
}

// putAt writes a key at revision rev; the caller advances s.revision. It
// decides every failure before it changes anything.
func (s *State) putAt(now, rev int64, p *Put) (*schema.KVPutReply, schema.Event, error) {
	old := s.getRecord(p.Key)
	var cur *lease
	if old != nil && old.lease != 0 {
		cur = s.getLease(old.lease)
	}
	var target *lease
	switch {
	case p.Lease != 0:
		target = s.getLease(p.Lease)
		if target == nil {
			return nil, schema.Event{}, errf(ErrLeaseNotFound, "lease %d not found", p.Lease)
		}
		if target.anonymous {
			return nil, schema.Event{}, errf(ErrLeaseNotFound, "lease %d is anonymous and belongs to one key", p.Lease)
		}
		if expiredAt(target, now) {
			return nil, schema.Event{}, errf(ErrLeaseNotFound, "lease %d expired", p.Lease)
		}
		if cur != nil && cur.id != target.id {
			return nil, schema.Event{}, errf(ErrLeaseConflict, "key %q is attached to lease %d; delete it before attaching it to lease %d", p.Key, cur.id, target.id)
		}
		if cur == nil && target.keyCount >= s.limits.MaxKeysPerLease {
			return nil, schema.Event{}, errf(ErrLimitExceeded, "lease %d has %d keys, the maximum", target.id, target.keyCount)
		}
	case p.TTL > 0:
		if cur != nil && !cur.anonymous {
			return nil, schema.Event{}, errf(ErrLeaseConflict, "key %q is attached to lease %d; delete it before putting it with a ttl", p.Key, cur.id)
		}
		if cur == nil && s.leaseTotal >= s.limits.MaxLeases {
			return nil, schema.Event{}, errf(ErrLimitExceeded, "%d active leases is the maximum", s.limits.MaxLeases)
		}
		if cur == nil {
			if err := s.checkLeaseQuota(); err != nil {
				return nil, schema.Event{}, err
			}
		}
		if !s.idsLeft() {
			return nil, schema.Event{}, errf(ErrLimitExceeded, "every lease id up to %d has been used", int64(MaxLeaseID))
		}
	}

	if err := s.checkPutQuota(old, int64(len(p.Value)+len(p.Metadata))); err != nil {
		return nil, schema.Event{}, err
	}

	reply := &schema.KVPutReply{}
	if p.PrevKV && old != nil {
		kv := s.keyValue(old, now, false)
		reply.PrevKV = &kv
	}
	var leaseID int64
	switch {
	case p.Lease != 0:
		if cur == nil {
			s.attach(target, p.Key)
		}
		leaseID = target.id
	case p.TTL > 0:
		if cur != nil {
			s.detach(cur.id, p.Key)
		}
		anonID, _ := s.nextFreeID()
		anon := &lease{id: anonID, ttl: p.TTL, deadline: now + p.TTL*1000, grantedRevision: rev, anonymous: true}
		s.setLease(anon)
		s.attach(anon, p.Key)
		leaseID = anon.id
	default:
		if cur != nil {
			s.detach(cur.id, p.Key)
		}
	}
	rec := &record{key: p.Key, value: p.Value, createRevision: rev, modRevision: rev, version: 1, lease: leaseID,
		extra: newExtra(p.ContentType, p.Metadata)}
	if old != nil {
		// The old record stays in the history: share its key rather than
		// keep the decoded copy, one string per version.
		rec.key = old.key
		rec.createRevision = old.createRevision
		rec.version = old.version + 1
	}
	s.kv.ReplaceOrInsert(rec)
	s.valueBytes += rec.size()
	if old != nil {
		s.valueBytes -= old.size()
	}
	s.prevs = append(s.prevs, old)
	reply.Revision = rev
	ev := schema.Event{
		Type:           schema.EventPut,
		Key:            rec.key,
		Value:          rec.value,
		Revision:       rev,
		CreateRevision: rec.createRevision,
		ModRevision:    rev,
		Version:        rec.version,
		Lease:          leaseID,
		Cause:          schema.CausePut,
		ContentType:    rec.contentType(),
		Metadata:       rec.metadata(),
	}
	return reply, ev, nil
}

// delete applies a delete at the next revision; deleting nothing leaves
// the revision where it is.
func (s *State) delete(now int64, d *Delete) (any, []schema.Event, error) {
	if d.ByTxn {
		return nil, nil, errf(ErrBadCommand, "a delete outside a transaction is marked as a transaction's")
	}
	victims, err := s.victims(d)
	if err != nil {
		return nil, nil, err
	}
	rev := s.revision + 1
	reply, events := s.deleteAt(now, rev, d, victims, 0)
	if len(events) > 0 {
		s.revision = rev
	}
	reply.Revision = s.revision
	return reply, events, nil
}

// victims lists the records a delete removes, in key order. A delete with a
// limit that matches more keys than it fails with ErrTooLarge.
func (s *State) victims(d *Delete) ([]*record, error) {
	var victims []*record
	if !d.IsPrefix && !d.IsRange {
		if r := s.getRecord(d.Key); r != nil {
			victims = append(victims, r)
		}
		return victims, nil
	}
	var over bool
	sp := spanOf(d.Key, d.IsPrefix, d.IsRange, d.RangeEnd)
	s.kv.AscendGreaterOrEqual(&record{key: sp.start}, func(r *record) bool {
		if sp.past(r.key) {
			return false
		}
		if d.Limit > 0 && int64(len(victims)) >= d.Limit {
			over = true
			return false
		}
		victims = append(victims, r)
		return true
	})
	if over {
		return nil, errf(ErrTooLarge, "prefix %q matches more than %d keys, the limit of a delete in a transaction", d.Key, d.Limit)
	}
	return victims, nil
}

// deleteAt removes victims at revision rev (the caller advances
// s.revision when it removed any), numbering events from opIndex.
func (s *State) deleteAt(now, rev int64, d *Delete, victims []*record, opIndex int) (*schema.KVDeleteReply, []schema.Event) {
	reply := &schema.KVDeleteReply{Revision: rev, Deleted: int64(len(victims))}
	if len(victims) == 0 {
		return reply, nil
	}
	if d.PrevKV {
		reply.PrevKVs = make([]schema.KeyValue, len(victims))
		for i, r := range victims {
			reply.PrevKVs[i] = s.keyValue(r, now, false)
		}
	}
	cause := schema.CauseDelete
	if d.ByTxn {
		cause = schema.CauseTxn
	}
	events := make([]schema.Event, len(victims))
	for i, r := range victims {
		s.kv.Delete(r)
		s.valueBytes -= r.size()
		if r.lease != 0 {
			s.detach(r.lease, r.key)
		}
		events[i] = deleteEvent(r.key, rev, opIndex+i, r.lease, cause)
		s.prevs = append(s.prevs, r)
	}
	return reply, events
}

// keyValue renders a record for a reply; remaining time is measured at now.
func (s *State) keyValue(r *record, now int64, keysOnly bool) schema.KeyValue {
	kv := schema.KeyValue{
		Key:            r.key,
		CreateRevision: r.createRevision,
		ModRevision:    r.modRevision,
		Version:        r.version,
		Lease:          r.lease,
	}
	if !keysOnly {
		kv.Value = r.value
		kv.ContentType, kv.Metadata = r.contentType(), r.metadata()
	}
	if r.lease != 0 {
		if l := s.getLease(r.lease); l != nil {
			ms := remainingMS(l, now)
			kv.RemainingMS = &ms
		}
	}
	return kv
}

func remainingMS(l *lease, now int64) int64 {
	if l.deadline <= now {
		return 0
	}
	return l.deadline - now
}
