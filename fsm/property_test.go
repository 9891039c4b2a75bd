package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/concord-io/concord/schema"
)

// After every command of random sequences the invariants hold: keys and
// leases point at each other, key counts match, anonymous leases hold one
// key, Expired/NextDeadline agree with the deadlines, the revision and the
// clock never go back, events are numbered as the contract says, and a
// failed command changes nothing but the clock.
func TestPropertyInvariants(t *testing.T) {
	for _, seed := range []int64{101, 202, 303, 404} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			g := newCmdGen(seed)
			s := New()
			cov := newCoverage()
			for i := 0; i < 2500; i++ {
				entry := g.next(s)
				if err := checkStep(s, entry, cov); err != nil {
					t.Fatalf("seed %d entry %d: %v", seed, i, err)
				}
			}
			cov.check(t)
		})
	}
}

// checkStep applies one entry and checks everything that must hold about
// the step and the state after it.
func checkStep(s *State, entry []byte, cov *coverage) error {
	prevRev, prevNow := s.Revision(), s.Now()
	before := snapBytes(s)
	cmd, decErr := Decode(entry)
	// For expires: which listed leases existed, with which deadline.
	deadlines := map[int64]int64{}
	if e, ok := cmd.Body.(*Expire); decErr == nil && ok {
		for _, id := range e.IDs {
			if l := s.getLease(id); l != nil {
				deadlines[id] = l.deadline
			}
		}
	}
	if decErr == nil && cmd.Now < prevNow {
		cov.rewound++
	}

	r := s.Apply(entry)
	cov.add(r)
	now := s.Now()

	// The clock: max(stamp, previous); untouched by undecodable entries.
	wantNow := prevNow
	if decErr == nil && cmd.Now > prevNow {
		wantNow = cmd.Now
	}
	if now != wantNow {
		return fmt.Errorf("now %d after %d with stamp %d (decode err %v)", now, prevNow, cmd.Now, decErr)
	}
	if s.Revision() < prevRev {
		return fmt.Errorf("revision went back %d -> %d", prevRev, s.Revision())
	}

	if r.Err != nil {
		if r.Reply != nil || r.Events != nil || r.Expired != nil || s.Revision() != prevRev {
			return fmt.Errorf("failed %v (%v) produced output or moved the revision: %+v", cmd.Op, r.Err, r)
		}
		// Nothing but the clock changed: the state equals the previous one
		// after a tick at the same stamp.
		want := New()
		if err := want.Restore(bytes.NewReader(before)); err != nil {
			return err
		}
		if decErr == nil {
			want.ApplyCommand(Command{Op: OpExpire, Now: cmd.Now, Body: &Expire{}})
		}
		if !bytes.Equal(snapBytes(s), snapBytes(want)) {
			return fmt.Errorf("failed %v (%v) changed the state", cmd.Op, r.Err)
		}
		return checkInvariants(s)
	}

	// Events: consecutive new revisions, op_index from 0 at each.
	rev, idx := prevRev, 0
	for i, e := range r.Events {
		switch {
		case e.Revision == rev && i > 0:
			idx++
		case e.Revision == rev+1:
			rev, idx = rev+1, 0
		default:
			return fmt.Errorf("event %d at revision %d after revision %d", i, e.Revision, rev)
		}
		if e.OpIndex != idx || e.ModRevision != e.Revision {
			return fmt.Errorf("event %d: op_index %d (want %d), mod_revision %d at revision %d", i, e.OpIndex, idx, e.ModRevision, e.Revision)
		}
	}
	if s.Revision() != rev {
		return fmt.Errorf("%v: events reach revision %d, state is at %d", cmd.Op, rev, s.Revision())
	}

	switch b := cmd.Body.(type) {
	case *Put:
		if len(r.Events) != 1 || s.Revision() != prevRev+1 {
			return fmt.Errorf("put: %d events, revision %d -> %d", len(r.Events), prevRev, s.Revision())
		}
		kv := s.Get(GetQuery{Key: b.Key}, now).KVs
		if len(kv) != 1 || kv[0].ModRevision != s.Revision() || kv[0].Lease != r.Events[0].Lease {
			return fmt.Errorf("put %q: record %+v, event %+v", b.Key, kv, r.Events[0])
		}
		if b.Lease != 0 && kv[0].Lease != b.Lease {
			return fmt.Errorf("put %q to lease %d attached it to %d", b.Key, b.Lease, kv[0].Lease)
		}
		if b.TTL > 0 {
			li, err := s.LeaseInfo(kv[0].Lease, false, now)
			if err != nil || !li.Anonymous || li.TTL != b.TTL || li.RemainingMS != b.TTL*1000 {
				return fmt.Errorf("ttl put %q: lease %+v, %v", b.Key, li, err)
			}
		}
		if b.Lease == 0 && b.TTL == 0 && kv[0].Lease != 0 {
			return fmt.Errorf("plain put %q left it on lease %d", b.Key, kv[0].Lease)
		}
	case *Delete:
		rep := r.Reply.(*schema.KVDeleteReply)
		if int(rep.Deleted) != len(r.Events) || rep.Revision != s.Revision() {
			return fmt.Errorf("delete: reply %+v with %d events", rep, len(r.Events))
		}
		if b.PrevKV && len(rep.PrevKVs) != len(r.Events) {
			return fmt.Errorf("delete: %d prev_kvs for %d deletes", len(rep.PrevKVs), len(r.Events))
		}
		if len(r.Events) == 0 && s.Revision() != prevRev {
			return fmt.Errorf("a delete of nothing moved the revision")
		}
	case *Expire:
		var keys int64
		gone := map[int64]bool{}
		for _, x := range r.Expired {
			d, existed := deadlines[x.ID]
			if !existed || d != x.Deadline || x.Deadline >= now {
				return fmt.Errorf("expired lease %+v: existed %v deadline %d now %d", x, existed, d, now)
			}
			keys += x.Keys
			gone[x.ID] = true
		}
		if keys != int64(len(r.Events)) {
			return fmt.Errorf("expire: %d keys reported, %d events", keys, len(r.Events))
		}
		for id, d := range deadlines {
			_, err := s.LeaseInfo(id, false, now)
			if gone[id] != (err != nil) {
				return fmt.Errorf("lease %d: reported expired %v, still there %v", id, gone[id], err == nil)
			}
			if !gone[id] && d < now {
				return fmt.Errorf("lease %d with deadline %d survived an expire at %d", id, d, now)
			}
		}
	case *Revoke:
		rep := r.Reply.(*schema.LeaseRevokeReply)
		if int(rep.Deleted) != len(r.Events) || rep.Revision != s.Revision() {
			return fmt.Errorf("revoke: reply %+v with %d events", rep, len(r.Events))
		}
	case *Grant, *KeepAlive, *Limits:
		if len(r.Events) != 0 || s.Revision() != prevRev {
			return fmt.Errorf("%v changed keys", cmd.Op)
		}
	}
	return checkInvariants(s)
}

func snapBytes(s *State) []byte {
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		panic(err)
	}
	return buf.Bytes()
}
