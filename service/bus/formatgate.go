package bus

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
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
// that asks to join must read them too (CheckJoiner): the log it replays
// may hold batches.

// FormatGateOptions configure a FormatGate.
type FormatGateOptions struct {
	// Self is this node's id: it runs this release, and is never asked.
	Self string
	// Batching turns the leader's batching on and off.
	Batching func(on bool)
	// Members lists the members of the Raft configuration.
	Members func() ([]raft.Server, error)
	// Prober asks a member which log format it reads.
	Prober *Prober
	// Every is how often a leader asks the members again.
	Every time.Duration
	Log   *slog.Logger
}

// FormatGate turns the leader's batching on and off, and says which log
// formats and snapshot version every member reads.
type FormatGate struct {
	o FormatGateOptions

	mu sync.Mutex
	// gen changes whenever what is known is thrown away, so that a check
	// that began before cannot turn batching on after.
	gen uint64
	// readable is the newest log format every member reads, as the last
	// check found; 0 until a check has heard from all of them. Written
	// under mu, read without it: every request of a tenant asks.
	readable atomic.Int64
	// formats holds the members that reported, during this term, a log
	// format that reads batches. A member that stops answering (it is down)
	// keeps its place: it comes back on the same release, and it would
	// otherwise stop batches for the whole cluster while it is away.
	formats map[raft.ServerID]int
}

// NewFormatGate returns a gate with batching off and nothing known.
func NewFormatGate(o FormatGateOptions) *FormatGate {
	return &FormatGate{o: o, formats: map[raft.ServerID]int{}}
}

// reset forgets every member's format and turns batching off: at the start
// and end of each leader term.
func (g *FormatGate) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	clear(g.formats)
	g.readable.Store(0)
	g.o.Batching(false)
}

// AllRead reports whether every member reads log format format, as the
// last check found.
func (g *FormatGate) AllRead(format int) bool {
	return g.readable.Load() >= int64(format)
}

// learned records a member's format (one that reads batches), as
// CheckJoiner learns it.
func (g *FormatGate) learned(id raft.ServerID, format int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.formats[id] = format
}

// check asks every member of servers but self (which runs this release)
// which log format it reads, and turns batching on if all read batch
// entries, off otherwise. It returns whether batching is on and, when it
// is off, why: a sentence per member that keeps it off.
func (g *FormatGate) check(servers []raft.Server, self raft.ServerID, ask func(raft.ServerID) (int, error)) (bool, []string) {
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
	readable := 0
	if on {
		readable = fsm.LogFormat
		for _, id := range others {
			readable = min(readable, g.formats[id])
		}
	}
	g.readable.Store(int64(readable))
	g.o.Batching(on)
	return on, why
}

// Run keeps the leader's batching in step with what the members read,
// until ctx ends (the leader's term), and logs each change. Batching is
// off when it starts and when it ends.
func (g *FormatGate) Run(ctx context.Context) {
	g.reset()
	defer g.reset()
	t := time.NewTicker(g.o.Every)
	defer t.Stop()
	last := ""
	for {
		if servers, err := g.o.Members(); err == nil {
			on, why := g.check(servers, raft.ServerID(g.o.Self), g.memberLogFormat)
			state := "on"
			if !on {
				state = strings.Join(why, "; ")
			}
			if state != last {
				if on {
					g.o.Log.Info("batch entries on: every member reads them")
				} else {
					g.o.Log.Warn("batch entries off: every command goes alone", "why", state)
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
func (g *FormatGate) memberLogFormat(id raft.ServerID) (int, error) {
	info, err := g.o.Prober.AskNode(string(id), schema.NodeInfoRequest{}, time.Second)
	if err != nil {
		return 0, err
	}
	return info.LogFormat, nil
}

// CheckJoiner refuses a new member whose release cannot read batch
// entries: the log it would replay may hold them.
func (g *FormatGate) CheckJoiner(id string) *schema.Error {
	format, err := g.memberLogFormat(raft.ServerID(id))
	if err != nil {
		return schema.Errorf(schema.ErrUnavailable, "the leader could not learn which release node %s runs (it asks before admitting a node): %v", id, err)
	}
	if format < fsm.LogFormat {
		return schema.Errorf(schema.ErrClusterMismatch, "node %s runs an older release, which cannot read this cluster's log (log format %d, this cluster writes %d); upgrade it to the cluster's release before it joins", id, format, fsm.LogFormat)
	}
	g.learned(raft.ServerID(id), format)
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

// OlderSnapshotVersion is the version written for members that do not
// read the current one.
const OlderSnapshotVersion = 4

// SnapshotVersion asks the other members, as the batch gate does, and
// returns the snapshot version they all read. Raft calls it from the
// goroutine that writes the snapshot, never from Apply.
func (g *FormatGate) SnapshotVersion() int {
	servers, err := g.o.Members()
	if err != nil {
		g.o.Log.Warn("snapshot: could not read the configuration; writing the older version", "version", OlderSnapshotVersion, "err", err)
		return OlderSnapshotVersion
	}
	var why []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, srv := range servers {
		if srv.ID == raft.ServerID(g.o.Self) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			format, err := g.memberLogFormat(srv.ID)
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
		g.o.Log.Warn("snapshot: writing the older version, which every member reads", "version", OlderSnapshotVersion, "why", strings.Join(why, "; "))
		return OlderSnapshotVersion
	}
	return fsm.SnapshotVersion
}
