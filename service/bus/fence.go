package bus

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
	"github.com/concord-io/concord/subjects"
)

// busClearRounds is how many rounds in a row without another cluster end a
// conflict.
const busClearRounds = 3

// Conflict is another cluster seen on the bus under this prefix.
type Conflict struct {
	ours   string
	theirs []string // sorted cluster ids
	node   string   // a node of theirs that answered
	since  time.Time
}

// String says what is wrong and what to do, for error replies, /readyz and
// `concord status`.
func (c *Conflict) String() string {
	return fmt.Sprintf("two Concord clusters serve this subject prefix on one NATS bus: this cluster %s and cluster %s (node %s answered), seen since %s; this cluster stopped serving requests so that clients never get answers from both. Stop one of the clusters, or give one another --subject-prefix; service resumes by itself once only one remains",
		c.ours, strings.Join(c.theirs, ", "), c.node, c.since.UTC().Format(time.RFC3339))
}

// FenceHooks are what a conflict's start and end do to the node: Hold
// stops the lease clock and Release lets it start again, Gauge sets the
// conflict metric (1 or 0), and Changed wakes the leadership loop.
type FenceHooks struct {
	Hold, Release func()
	Gauge         func(float64)
	Changed       func()
}

// Fence holds the conflict with another cluster on the bus, if any, and
// acts on its start and end.
type Fence struct {
	conflict atomic.Pointer[Conflict]
	hooks    FenceHooks
	log      *slog.Logger
	names    subjects.Names
}

// NewFence returns a fence without a conflict.
func NewFence(h FenceHooks, names subjects.Names, log *slog.Logger) *Fence {
	return &Fence{hooks: h, names: names, log: log}
}

// Load returns the conflict, nil when there is none.
func (f *Fence) Load() *Conflict { return f.conflict.Load() }

// Err is the reply to every request while a conflict lasts.
func (f *Fence) Err() *schema.Error {
	if c := f.conflict.Load(); c != nil {
		return schema.Errorf(schema.ErrUnavailable, "%s", c.String())
	}
	return nil
}

// busWatch collects the answers to the node's periodic P.cluster.nodes
// probes. Answers may come late, so they go to one long-lived inbox and
// any foreign one counts, whenever it arrives.
type busWatch struct {
	f     *Fence
	inbox string

	// ours is this node's cluster id, set before each round's probe.
	ours atomic.Pointer[string]

	mu      sync.Mutex
	heard   bool              // an answer came this round
	foreign map[string]string // cluster id → a node of it, this round
	clean   int               // rounds in a row without a foreign id
}

// Watch asks P.cluster.nodes through p every `every` until ctx ends,
// whenever the node has a cluster id (in dataDir), and records a conflict
// as soon as a node of another cluster answers. The answers go to a plain
// inbox, not one under the prober's prefix: the node's own answer counts
// as one heard.
func (f *Fence) Watch(ctx context.Context, p *Prober, dataDir string, every time.Duration) {
	w := &busWatch{f: f, inbox: nats.NewInbox(), foreign: map[string]string{}}
	sub, err := p.nc.Subscribe(w.inbox, w.answer)
	if err != nil {
		f.log.Error("watch the bus for other clusters: subscribe", "err", err)
		return
	}
	defer sub.Unsubscribe()
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		ours, err := datadir.ReadClusterID(dataDir)
		if err == nil && ours != "" {
			w.ours.Store(&ours)
			w.endRound(ours)
			if err := p.askAll(w.inbox); err != nil {
				f.log.Debug("bus watch: probe", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// answer takes one answer to a probe.
func (w *busWatch) answer(m *nats.Msg) {
	ours := w.ours.Load()
	if ours == nil || isNoResponders(m) {
		return
	}
	info, err := parseNodeInfo(m)
	if err != nil {
		return
	}
	// Under w.mu, like the end of a round, so that a conflict cleared at
	// the end of a round cannot swallow a foreign answer arriving then.
	w.mu.Lock()
	defer w.mu.Unlock()
	w.heard = true
	if info.ClusterID != "" && info.ClusterID != *ours {
		w.foreign[info.ClusterID] = info.ID
		w.clean = 0
		// At once, not at the end of the round: this is what bounds the
		// time two clusters answer together.
		w.f.set(*ours, info.ClusterID, info.ID)
	}
}

// endRound closes the round that is ending: a round that heard answers
// (this node's own at least) and no foreign one counts towards clearing a
// conflict; a round that heard nothing says nothing.
func (w *busWatch) endRound(ours string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	heard, foreign := w.heard, len(w.foreign) > 0
	w.heard, w.foreign = false, map[string]string{}
	switch {
	case foreign:
		w.clean = 0
	case heard:
		w.clean++
	}
	if w.clean >= busClearRounds {
		w.f.clear(ours)
	}
}

// set records another cluster and, on the first one, stops the
// leader from serving.
func (f *Fence) set(ours, theirs, node string) {
	for {
		old := f.conflict.Load()
		c := &Conflict{ours: ours, theirs: []string{theirs}, node: node, since: time.Now()}
		if old != nil {
			if slices.Contains(old.theirs, theirs) {
				return
			}
			c.since, c.node = old.since, old.node
			c.theirs = append(slices.Clone(old.theirs), theirs)
			slices.Sort(c.theirs)
		}
		if f.conflict.CompareAndSwap(old, c) {
			// The lease clock stops now, not when the leadership loop gets
			// round to pausing the term: from this moment keep-alives are
			// refused, so no lease may expire and none may lose time.
			// Proposals and the expirer need the clock and stop with it;
			// the next leadership term starts it again from the log.
			f.hooks.Hold()
			f.hooks.Gauge(1)
			f.log.Error("another Concord cluster serves this subject prefix on the bus; not serving requests until it is gone",
				"cluster_id", ours, "other_cluster_ids", strings.Join(c.theirs, ","), "other_node", node, "prefix", f.names.Prefix())
			f.hooks.Changed()
			return
		}
	}
}

// clear ends a conflict once no other cluster has answered for
// busClearRounds rounds.
func (f *Fence) clear(ours string) {
	old := f.conflict.Load()
	if old == nil || !f.conflict.CompareAndSwap(old, nil) {
		return
	}
	f.hooks.Release()
	f.hooks.Gauge(0)
	f.log.Warn("no other Concord cluster answers on the bus any more; serving again", "cluster_id", ours, "was", strings.Join(old.theirs, ","))
	f.hooks.Changed()
}
