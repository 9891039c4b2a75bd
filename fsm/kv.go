package fsm

import (
	"strings"

	"github.com/concord-io/concord/schema"
)

func (s *State) getRecord(key string) *record {
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

func (s *State) put(now int64, p *Put) (any, []schema.Event, error) {
	old := s.getRecord(p.Key)
	var cur *lease
	if old != nil && old.lease != 0 {
		cur = s.getLease(old.lease)
	}
	// Decide every failure before changing anything.
	var target *lease
	switch {
	case p.Lease != 0:
		target = s.getLease(p.Lease)
		if target == nil {
			return nil, nil, errf(ErrLeaseNotFound, "lease %d not found", p.Lease)
		}
		if target.anonymous {
			return nil, nil, errf(ErrLeaseNotFound, "lease %d is anonymous and belongs to one key", p.Lease)
		}
		if cur != nil && cur.id != target.id {
			return nil, nil, errf(ErrLeaseConflict, "key %q is attached to lease %d; delete it before attaching it to lease %d", p.Key, cur.id, target.id)
		}
		if cur == nil && target.keyCount >= s.limits.MaxKeysPerLease {
			return nil, nil, errf(ErrLimitExceeded, "lease %d has %d keys, the maximum", target.id, target.keyCount)
		}
	case p.TTL > 0:
		if cur != nil && !cur.anonymous {
			return nil, nil, errf(ErrLeaseConflict, "key %q is attached to lease %d; delete it before putting it with a ttl", p.Key, cur.id)
		}
		if cur == nil && int64(s.leases.Len()) >= s.limits.MaxLeases {
			return nil, nil, errf(ErrLimitExceeded, "%d active leases is the maximum", s.limits.MaxLeases)
		}
		if !s.idsLeft() {
			return nil, nil, errf(ErrLimitExceeded, "every lease id up to %d has been used", int64(MaxLeaseID))
		}
	}

	reply := &schema.KVPutReply{}
	if p.PrevKV && old != nil {
		kv := s.keyValue(old, now, false)
		reply.PrevKV = &kv
	}
	s.revision++
	rev := s.revision
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
	rec := &record{key: p.Key, value: p.Value, createRevision: rev, modRevision: rev, version: 1, lease: leaseID}
	if old != nil {
		rec.createRevision = old.createRevision
		rec.version = old.version + 1
	}
	s.kv.ReplaceOrInsert(rec)
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
	}
	return reply, []schema.Event{ev}, nil
}

func (s *State) delete(now int64, d *Delete) (any, []schema.Event) {
	var victims []*record
	if d.IsPrefix {
		s.kv.AscendGreaterOrEqual(&record{key: d.Key}, func(r *record) bool {
			if !strings.HasPrefix(r.key, d.Key) {
				return false
			}
			victims = append(victims, r)
			return true
		})
	} else if r := s.getRecord(d.Key); r != nil {
		victims = append(victims, r)
	}
	reply := &schema.KVDeleteReply{Revision: s.revision}
	if len(victims) == 0 {
		return reply, nil
	}
	if d.PrevKV {
		reply.PrevKVs = make([]schema.KeyValue, len(victims))
		for i, r := range victims {
			reply.PrevKVs[i] = s.keyValue(r, now, false)
		}
	}
	s.revision++
	events := make([]schema.Event, len(victims))
	for i, r := range victims {
		s.kv.Delete(r)
		if r.lease != 0 {
			s.detach(r.lease, r.key)
		}
		events[i] = deleteEvent(r.key, s.revision, i, r.lease, schema.CauseDelete)
	}
	reply.Revision = s.revision
	reply.Deleted = int64(len(victims))
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
