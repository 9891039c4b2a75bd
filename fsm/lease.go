package fsm

import (
	"slices"

	"github.com/concord-io/concord/schema"
)

func (s *State) getLease(id int64) *lease {
	if s.applying {
		s.pivotLease.id = id
		l, _ := s.leases.Get(&s.pivotLease)
		return l
	}
	l, _ := s.leases.Get(&lease{id: id})
	return l
}

// setLease inserts or replaces a lease and keeps the deadline index in step.
func (s *State) setLease(l *lease) {
	old, replaced := s.leases.ReplaceOrInsert(l)
	switch {
	case replaced:
		s.expiry.Delete(deadlineEntry{old.deadline, old.id})
	case l.anonymous:
		s.leaseTotal++
		s.anonymous++
		s.activity.GrantedAnonymous++
	default:
		s.leaseTotal++
		s.activity.Granted++
	}
	s.expiry.ReplaceOrInsert(deadlineEntry{l.deadline, l.id})
}

// dropLease removes a lease record; its keys must already be gone.
func (s *State) dropLease(l *lease) {
	s.leases.Delete(l)
	s.expiry.Delete(deadlineEntry{l.deadline, l.id})
	s.leaseTotal--
	if l.anonymous {
		s.anonymous--
	}
}

// MaxLeaseID is the largest lease id (see schema.MaxLeaseID).
const MaxLeaseID = schema.MaxLeaseID

// nextFreeID takes the next id from the counter. Ids below the counter are
// never handed out again, even after their lease is gone. It returns false
// when the id space is used up.
func (s *State) nextFreeID() (int64, bool) {
	id := s.firstFreeID()
	if id > MaxLeaseID {
		return 0, false
	}
	s.nextLeaseID = id + 1
	return id, true
}

// idsLeft reports whether nextFreeID can hand out another id.
func (s *State) idsLeft() bool { return s.firstFreeID() <= MaxLeaseID }

// firstFreeID is the counter moved past ids taken by requested grants.
func (s *State) firstFreeID() int64 {
	id := s.nextLeaseID
	for id <= MaxLeaseID && s.getLease(id) != nil {
		id++
	}
	return id
}

func (s *State) grant(now int64, g *Grant) (any, error) {
	if s.leaseTotal >= s.limits.MaxLeases {
		return nil, errf(ErrLimitExceeded, "%d active leases is the maximum", s.limits.MaxLeases)
	}
	if err := s.checkLeaseQuota(); err != nil {
		return nil, err
	}
	id := g.ID
	if id < 0 || id > MaxLeaseID {
		return nil, errf(ErrLimitExceeded, "lease id %d is outside 1..%d", id, int64(MaxLeaseID))
	}
	if id == 0 && !s.idsLeft() {
		return nil, errf(ErrLimitExceeded, "every lease id up to %d has been used", int64(MaxLeaseID))
	}
	if id != 0 {
		if s.getLease(id) != nil {
			return nil, errf(ErrLeaseExists, "lease %d is already granted", id)
		}
		// Keep the counter ahead of every id ever used, so it never hands
		// this one out later.
		if id >= s.nextLeaseID {
			s.nextLeaseID = id + 1
		}
	} else {
		id, _ = s.nextFreeID()
	}
	s.setLease(&lease{
		id:              id,
		ttl:             g.TTL,
		deadline:        now + g.TTL*1000,
		grantedRevision: s.revision,
		metadata:        g.Metadata,
	})
	return &schema.LeaseGrantReply{ID: id, TTL: g.TTL, Revision: s.revision}, nil
}

func (s *State) keepAlive(now int64, k *KeepAlive) (any, error) {
	l := s.getLease(k.ID)
	if l == nil {
		return nil, errf(ErrLeaseNotFound, "lease %d not found", k.ID)
	}
	if l.anonymous {
		return nil, errf(ErrLeaseNotFound, "lease %d is anonymous; re-put its key with a ttl to refresh it", k.ID)
	}
	// A lease past its deadline that the leader has not yet expired is
	// renewed: a keep-alive that lands before the expire entry wins.
	nl := *l
	if k.TTL > 0 {
		nl.ttl = k.TTL
	}
	nl.deadline = now + nl.ttl*1000
	s.setLease(&nl)
	s.activity.Renewed++
	return &schema.LeaseKeepAliveReply{ID: nl.id, TTL: nl.ttl, RemainingTTL: nl.ttl, RemainingMS: nl.ttl * 1000}, nil
}

// keepAliveMany renews each listed explicit lease that exists, like
// keepAlive, and lists the others as not found. It never fails: one
// request carries a whole process's leases.
func (s *State) keepAliveMany(now int64, k *KeepAliveMany) *schema.LeaseKeepAliveManyReply {
	reply := &schema.LeaseKeepAliveManyReply{Leases: []schema.LeaseKeepAliveReply{}, NotFound: []int64{}}
	for _, id := range k.IDs {
		r, err := s.keepAlive(now, &KeepAlive{ID: id})
		if err != nil {
			reply.NotFound = append(reply.NotFound, id)
			continue
		}
		reply.Leases = append(reply.Leases, *r.(*schema.LeaseKeepAliveReply))
	}
	return reply
}

func (s *State) revoke(r *Revoke) (any, []schema.Event, error) {
	l := s.getLease(r.ID)
	if l == nil {
		return nil, nil, errf(ErrLeaseNotFound, "lease %d not found", r.ID)
	}
	events := s.removeLeaseWithKeys(l, schema.CauseLeaseRevoked, nil)
	return &schema.LeaseRevokeReply{Revision: s.revision, Deleted: int64(len(events))}, events, nil
}

// expiredAt reports whether a lease's deadline has passed at now. Such a
// lease waits only for the leader's expire command. A keep-alive still
// renews it, but it takes no new keys (the leases proposal, §13): a put
// naming it fails as if it were gone.
func expiredAt(l *lease, now int64) bool { return l.deadline < now }

// expire removes each listed lease whose deadline is strictly before now.
// The check is made here, at apply time, so that a keep-alive applied after
// the leader decided to expire a lease but before this entry wins. Strictly
// before, because the clock has millisecond resolution: a deadline equal to
// now may still be up to a millisecond in the future in real time.
func (s *State) expire(now int64, e *Expire) ([]schema.Event, []ExpiredLease) {
	var events []schema.Event
	var expired []ExpiredLease
	for _, id := range e.IDs {
		l := s.getLease(id)
		if l == nil || !expiredAt(l, now) {
			continue
		}
		before := len(events)
		events = s.removeLeaseWithKeys(l, schema.CauseLeaseExpired, events)
		expired = append(expired, ExpiredLease{ID: id, Keys: int64(len(events) - before), Deadline: l.deadline})
	}
	return events, expired
}

// removeLeaseWithKeys deletes every key of the lease at one new revision (no
// revision when it has none), removes the lease, and appends the delete
// events to events. Keys go in key order, so every replica deletes and
// numbers them identically.
func (s *State) removeLeaseWithKeys(l *lease, cause string, events []schema.Event) []schema.Event {
	if l.keyCount > 0 {
		s.revision++
		events = slices.Grow(events, int(l.keyCount))
		keys := make([]string, 0, l.keyCount)
		s.attached.AscendRange(attachment{l.id, ""}, attachment{l.id + 1, ""}, func(a attachment) bool {
			keys = append(keys, a.key)
			return true
		})
		for i, k := range keys {
			s.attached.Delete(attachment{l.id, k})
			prev, _ := s.kv.Delete(&record{key: k})
			s.valueBytes -= prev.size()
			s.prevs = append(s.prevs, prev)
			events = append(events, deleteEvent(k, s.revision, i, l.id, cause))
		}
	}
	s.dropLease(l)
	return events
}

func deleteEvent(key string, rev int64, opIndex int, leaseID int64, cause string) schema.Event {
	return schema.Event{
		Type:        schema.EventDelete,
		Key:         key,
		Revision:    rev,
		OpIndex:     opIndex,
		ModRevision: rev,
		Lease:       leaseID,
		Cause:       cause,
	}
}
