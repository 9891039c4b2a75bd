package fsm

import (
	"strings"

	"github.com/google/btree"

	"github.com/concord-io/concord/schema"
)

// change is one event in the change log, with the lease-clock time of the
// command that made it (for retention by age). Immutable once in the tree.
type change struct {
	event schema.Event
	now   int64
}

func lessChange(a, b *change) bool {
	if a.event.Revision != b.event.Revision {
		return a.event.Revision < b.event.Revision
	}
	return a.event.OpIndex < b.event.OpIndex
}

func newChangeLog() *btree.BTreeG[*change] { return btree.NewG(btreeDegree, lessChange) }

// recordChanges appends a command's events to the change log and drops the
// oldest revisions beyond the count and age limits. A revision goes whole:
// the compaction floor is always a revision boundary.
func (s *State) recordChanges(events []schema.Event, now int64) {
	for i := range events {
		s.changes.ReplaceOrInsert(&change{event: events[i], now: now})
	}
	for {
		oldest, ok := s.changes.Min()
		if !ok {
			return
		}
		tooMany := int64(s.changes.Len()) > s.limits.ChangesMax
		tooOld := s.limits.ChangesMaxAgeMS > 0 && oldest.now < now-s.limits.ChangesMaxAgeMS
		if !tooMany && !tooOld {
			return
		}
		rev := oldest.event.Revision
		for {
			c, ok := s.changes.Min()
			if !ok || c.event.Revision != rev {
				break
			}
			s.changes.DeleteMin()
		}
		s.compactRevision = rev
	}
}

// ChangesQuery reads the change log.
type ChangesQuery struct {
	Key      string
	IsPrefix bool
	// AfterRevision and AfterOpIndex: events strictly after this position.
	// AfterOpIndex -1 means after the whole revision.
	AfterRevision int64
	AfterOpIndex  int
	Limit         int
	// MaxBytes bounds the approximate size of the events returned.
	MaxBytes int
}

// maxChangesScan bounds how many log entries one read looks at, so a
// narrow filter over a long log cannot stall the leader.
const maxChangesScan = 100_000

// Changes returns matching events after the position, in order. When the
// position is below the compaction floor the events in between are gone
// and it fails with ErrCompacted. The reply's next position is where the
// scan stopped, which may be past the last event returned when it skipped
// events that did not match; at the end of the log it is the current
// revision, so a client that polls from there misses nothing.
func (s *State) Changes(q ChangesQuery) (*schema.KVChangesReply, error) {
	if q.AfterRevision < s.compactRevision || (q.AfterRevision == s.compactRevision && q.AfterOpIndex >= 0 && s.compactRevision > 0) {
		return nil, errf(ErrCompacted, "revisions up to %d are compacted; read again from %d", s.compactRevision, s.compactRevision)
	}
	reply := &schema.KVChangesReply{Events: []schema.Event{}, CompactRevision: s.compactRevision}
	start := &change{event: schema.Event{Revision: q.AfterRevision + 1}}
	if q.AfterOpIndex >= 0 {
		start = &change{event: schema.Event{Revision: q.AfterRevision, OpIndex: q.AfterOpIndex + 1}}
	}
	posRev, posOp := q.AfterRevision, q.AfterOpIndex
	scanned, size := 0, 0
	s.changes.AscendGreaterOrEqual(start, func(c *change) bool {
		e := &c.event
		if e.Key == q.Key || (q.IsPrefix && strings.HasPrefix(e.Key, q.Key)) {
			n := len(e.Key) + len(e.Value) + recordOverhead
			if len(reply.Events) >= q.Limit || (q.MaxBytes > 0 && len(reply.Events) > 0 && size+n > q.MaxBytes) {
				reply.More = true
				return false
			}
			size += n
			reply.Events = append(reply.Events, *e)
		}
		posRev, posOp = e.Revision, e.OpIndex
		if scanned++; scanned >= maxChangesScan {
			reply.More = true
			return false
		}
		return true
	})
	switch {
	case !reply.More:
		posRev, posOp = max(posRev, s.revision), -1
	case !s.revisionHasMore(posRev, posOp):
		posOp = -1
	}
	reply.NextRevision, reply.NextOpIndex = posRev, posOp
	return reply, nil
}

// revisionHasMore reports whether the log holds an event of rev after opIndex.
func (s *State) revisionHasMore(rev int64, opIndex int) bool {
	if opIndex < 0 {
		return false
	}
	more := false
	s.changes.AscendGreaterOrEqual(&change{event: schema.Event{Revision: rev, OpIndex: opIndex + 1}}, func(c *change) bool {
		more = c.event.Revision == rev
		return false
	})
	return more
}

// CompactRevision is the change log's floor: events at or below it are gone.
func (s *State) CompactRevision() int64 { return s.compactRevision }
