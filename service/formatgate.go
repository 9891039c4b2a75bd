package service

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

// Batch entries (fsm.EncodeBatch) are a log entry format that releases
// before this one cannot read: a follower running one would fail to apply
// them, and its state would part from the others'. So a leader proposes
// batches only once every member of the Raft configuration has said in its
// node info that it reads them (schema.NodeInfo.LogFormat). During a
// rolling upgrade, while any member still runs an older release or has not
// answered, every command goes alone, as before batches existed. A node
// that asks to join must read them too (checkJoiner): the log it replays
// may hold batches.

// formatGate turns the proposer's batching on and off for one leader.
type formatGate struct {
	batching func(on bool)

	mu sync.Mutex
	// gen changes whenever what is known is thrown away, so that a check
	// that began before cannot turn batching on after.
	gen uint64
	// readable is the newest log format every member reads, as the last
	// check found; 0 until a check has heard from all of them.
	readable int
	// formats holds the members that reported, during this term, a log
	// format that reads batches. A member that stops answering (it is down)
	// keeps its place: it comes back on the same release, and it would
	// otherwise stop batches for the whole cluster while it is away.
	formats map[raft.ServerID]int
}

func newFormatGate(batching func(on bool)) *formatGate {
	return &formatGate{batching: batching, formats: map[raft.ServerID]int{}}
}

// reset forgets every member's format and turns batching off: at the start
// and end of each leader term.
func (g *formatGate) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	clear(g.formats)
	g.readable = 0
	g.batching(false)
}

// allRead reports whether every member reads log format format, as the
// last check found.
func (g *formatGate) allRead(format int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.readable >= format
}

// learned records a member's format (one that reads batches), as
// checkJoiner learns it.
func (g *formatGate) learned(id raft.ServerID, format int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.formats[id] = format
}

// check asks every member of servers but self (which runs this release)
// which log format it reads, and turns batching on if all read batch
// entries, off otherwise. It returns whether batching is on and, when it
// is off, why: a sentence per member that keeps it off.
func (g *formatGate) check(servers []raft.Server, self raft.ServerID, ask func(raft.ServerID) (int, error)) (bool, []string) {
	g.mu.Lock()
	gen := g.gen
	g.mu.Unlock()

	var others []raft.ServerID
	for _, srv := range servers {
		if srv.ID != self {
			others = append(others, srv.ID)
		}
	}
	answers := make([]int, len(others))
	errs := make([]error, len(others))
	var wg sync.WaitGroup
	for i, id := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = ask(id)
		}()
	}
	wg.Wait()

	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gen != gen {
		return false, []string{"a new term began while members were asked"}
	}
	var why []string
	for i, id := range others {
		_, known := g.formats[id]
		switch {
		case errs[i] == nil && answers[i] >= fsm.LogFormatBatch:
			g.formats[id] = answers[i]
		case errs[i] == nil:
			// Reinstalled on an older release, say: it cannot apply the
			// batches already in the log, and must get no more.
			delete(g.formats, id)
			why = append(why, fmt.Sprintf("node %s runs a release that reads log format %d, older than batch entries (%d)", id, answers[i], fsm.LogFormatBatch))
		case !known:
			why = append(why, fmt.Sprintf("node %s has not said which log format it reads: %v", id, errs[i]))
		}
	}
	on := len(why) == 0
	g.readable = 0
	if on {
		g.readable = fsm.LogFormat
		for _, id := range others {
			g.readable = min(g.readable, g.formats[id])
		}
	}
	g.batching(on)
	return on, why
}

// runFormatGate keeps the proposer's batching in step with what the
// members read, for as long as this node leads, and logs each change.
func (s *Service) runFormatGate(ctx context.Context) {
	s.formats.reset()
	defer s.formats.reset()
	t := time.NewTicker(s.cfg.BusCheckInterval)
	defer t.Stop()
	last := ""
	for {
		if f := s.raft.GetConfiguration(); f.Error() == nil {
			on, why := s.formats.check(f.Configuration().Servers, raft.ServerID(s.cfg.NodeID), s.memberLogFormat)
			state := "on"
			if !on {
				state = strings.Join(why, "; ")
			}
			if state != last {
				if on {
					s.log.Info("batch entries on: every member reads them")
				} else {
					s.log.Warn("batch entries off: every command goes alone", "why", state)
				}
				last = state
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// memberLogFormat asks a node which log format its release reads. A node
// that answers without saying runs a release from before batch entries.
func (s *Service) memberLogFormat(id raft.ServerID) (int, error) {
	info, err := s.prober.AskNode(string(id), schema.NodeInfoRequest{}, time.Second)
	if err != nil {
		return 0, err
	}
	return info.LogFormat, nil
}

// checkJoiner refuses a new member whose release cannot read batch
// entries: the log it would replay may hold them.
func (s *Service) checkJoiner(id string) *schema.Error {
	format, err := s.memberLogFormat(raft.ServerID(id))
	if err != nil {
		return schema.Errorf(schema.ErrUnavailable, "the leader could not learn which release node %s runs (it asks before admitting a node): %v", id, err)
	}
	if format < fsm.LogFormat {
		return schema.Errorf(schema.ErrClusterMismatch, "node %s runs an older release, which cannot read this cluster's log (log format %d, this cluster writes %d); upgrade it to the cluster's release before it joins", id, format, fsm.LogFormat)
	}
	s.formats.learned(raft.ServerID(id), format)
	return nil
}

// Snapshot versions during a rolling upgrade. A node writes its snapshots
// for itself, but when it leads it sends its latest one to a follower too
// far behind to catch up from the log, and a release before snapshot
// version 5 cannot read one. So a node writes version 5 only when every
// other member of the configuration says it reads it, and version 4
// otherwise: while a member runs an older release, or cannot be asked
// (it is down: it may come back on the older release).

// snapshotV5LogFormat is the log format of the first release that reads
// snapshot version 5: both came in the same release.
const snapshotV5LogFormat = fsm.LogFormatTxnCause

// olderSnapshotVersion is the version written for members that do not
// read the current one.
const olderSnapshotVersion = 4

// snapshotVersion asks the other members, as the batch gate does, and
// returns the snapshot version they all read. Raft calls it from the
// goroutine that writes the snapshot, never from Apply.
func (s *Service) snapshotVersion() int {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		s.log.Warn("snapshot: could not read the configuration; writing the older version", "version", olderSnapshotVersion, "err", err)
		return olderSnapshotVersion
	}
	var why []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, srv := range f.Configuration().Servers {
		if srv.ID == raft.ServerID(s.cfg.NodeID) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			format, err := s.memberLogFormat(srv.ID)
			if err == nil && format >= snapshotV5LogFormat {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				why = append(why, fmt.Sprintf("node %s could not be asked which release it runs: %v", srv.ID, err))
			} else {
				why = append(why, fmt.Sprintf("node %s runs a release that reads log format %d, before snapshot version %d", srv.ID, format, fsm.SnapshotVersion))
			}
		}()
	}
	wg.Wait()
	if len(why) > 0 {
		sort.Strings(why)
		s.log.Warn("snapshot: writing the older version, which every member reads", "version", olderSnapshotVersion, "why", strings.Join(why, "; "))
		return olderSnapshotVersion
	}
	return fsm.SnapshotVersion
}
