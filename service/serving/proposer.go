package serving

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/service/failpoint"
	"github.com/concord-io/concord/service/replica"
)

// Proposal batching. Raft's cost per log entry (futures, inflight lists,
// the log store's per-entry encoding and record, apply bookkeeping) showed
// as about a fifth of each node's CPU under many small concurrent
// requests. The proposer lets one entry carry the commands of many
// requests: while maxInflight entries are in flight, new commands wait in
// a queue, and the next entry takes everything queued (fsm.EncodeBatch).
// With fewer in flight a command is proposed at once, alone, as the
// single-command entry it always was, so an idle server answers as fast as
// before: nothing waits for a timer.
//
// Batch entries are proposed only while batching is on (the node turns it
// on once every member reads them, Server.SetBatching); while it is off
// every command goes straight to Raft as its own entry, with no bound on
// how many are in flight, exactly as before batches existed.
//
// There is no proposing goroutine: the request that finds a free slot
// proposes, and a request whose entry has applied hands the next batch to
// the first request in it. That saves a goroutine hand-over per request.
const (
	// proposeInflight is the number of entries the proposer keeps in
	// flight (K). Measured with 32 clients on 3 nodes, 1 gave the most
	// requests per second and the least CPU per request; 2 and 4 split the
	// same requests into more, smaller entries, and Raft's per-entry cost
	// came back.
	proposeInflight = 1
	// maxBatchCommands and maxBatchBytes bound one batch entry: a quarter
	// of what one put may take alone with the default --max-value-bytes
	// (1 MiB), so batches do not make Raft's in-memory log cache
	// (logCacheSize entries) or its append requests larger than single
	// entries already may. A command larger than maxBatchBytes goes alone.
	maxBatchCommands = 256
	maxBatchBytes    = 256 << 10
)

// proposer groups concurrently proposed commands into Raft log entries.
type proposer struct {
	// apply appends one entry to the Raft log.
	apply       func(entry []byte) raft.ApplyFuture
	maxInflight int
	maxCommands int
	maxBytes    int
	// clock reads the time a batch is proposed at, to leave out the
	// proposals whose deadline has passed by then; time.Now but in tests.
	clock func() time.Time
	// stop ends with the node (the ctx given to New). A future Raft took but never
	// served when it shut down is never answered (raft v1.8.0), so entries
	// are waited for until stop ends and then answered outcome unknown:
	// a goroutine that proposes may be one Close waits for (the limits
	// proposal when a term starts).
	stop context.Context
	// batching is on while every member of the cluster reads batch
	// entries (formatGate).
	batching atomic.Bool
	// proposing counts the calls of propose not yet returned: the writes
	// in flight, which listings give way to (listingpace.go).
	proposing atomic.Int64

	mu sync.Mutex
	// queue holds the proposals no entry has taken yet, oldest first.
	queue []*proposal
	// inflight counts the batches taken from the queue and not yet
	// answered. A batch's slot passes to the next batch while the queue
	// is not empty, so the queue only waits while inflight is at its
	// maximum.
	inflight int
}

// proposal is one request's encoded command and, once its entry has
// applied or failed, its result.
type proposal struct {
	data []byte
	// deadline, unless zero, is the last moment the command may enter
	// the log (the request's Concord-Deadline).
	deadline time.Time
	// res or err is set by whoever proposed the entry, before wake tells.
	res *fsm.Result
	err *schema.Error
	// wake receives once at most: nil when the proposal is answered, or a
	// batch, whose first proposal this is, to propose.
	wake chan []*proposal
}

// newProposer returns a proposer with batching on or off.
func newProposer(apply func([]byte) raft.ApplyFuture, batching bool) *proposer {
	p := &proposer{apply: apply, maxInflight: proposeInflight, maxCommands: maxBatchCommands, maxBytes: maxBatchBytes, clock: time.Now, stop: context.Background()}
	p.batching.Store(batching)
	return p
}

// propose appends a command (an entry from fsm.EncodeKeyed) to the log,
// alone or with the commands of concurrent requests, and returns its
// result. A Raft error is the wire error of every command in the entry. A
// command still waiting when its deadline (unless zero) passes is left out
// of the log and answered decode.DeadlinePassed.
func (p *proposer) propose(data []byte, deadline time.Time) (*fsm.Result, *schema.Error) {
	p.proposing.Add(1)
	defer p.proposing.Add(-1)
	me := &proposal{data: data, deadline: deadline}
	if !p.batching.Load() {
		// Commands still queued from before batching went off drain one
		// entry each (takeLocked).
		p.proposeEntry([]*proposal{me})
		return me.res, me.err
	}
	me.wake = make(chan []*proposal, 1)
	p.mu.Lock()
	p.queue = append(p.queue, me)
	var batch []*proposal
	// A slot is free only while the queue is empty (a finished batch
	// passes its slot on while anything waits), so this takes just me.
	if p.inflight < p.maxInflight {
		p.inflight++
		batch = p.takeLocked()
	}
	p.mu.Unlock()
	for {
		if batch == nil {
			if batch = <-me.wake; batch == nil {
				return me.res, me.err
			}
		}
		mine := slices.Contains(batch, me)
		p.run(me, batch)
		if mine {
			return me.res, me.err
		}
		batch = nil
	}
}

// writing reports whether any proposal is in flight.
func (p *proposer) writing() bool { return p.proposing.Load() > 0 }

// takeLocked removes the next batch from the queue: everything queued, up
// to the count and byte bounds, and at least one proposal; just one while
// batching is off, so that nothing queued becomes a batch entry after the
// members' formats are in doubt.
func (p *proposer) takeLocked() []*proposal {
	limit := p.maxCommands
	if !p.batching.Load() {
		limit = 1
	}
	n, size := 0, 0
	for n < len(p.queue) && n < limit {
		size += len(p.queue[n].data)
		if n > 0 && size > p.maxBytes {
			break
		}
		n++
	}
	batch := make([]*proposal, n)
	copy(batch, p.queue)
	rest := copy(p.queue, p.queue[n:])
	clear(p.queue[rest:])
	p.queue = p.queue[:rest]
	return batch
}

// run proposes one batch and answers its proposals; me, the caller's own
// proposal, learns its answer on return instead. If anything is queued,
// the next batch takes the slot and goes to its first proposal to propose.
func (p *proposer) run(me *proposal, batch []*proposal) {
	p.proposeEntry(batch)
	p.mu.Lock()
	var next []*proposal
	if len(p.queue) > 0 {
		next = p.takeLocked()
	} else {
		p.inflight--
	}
	p.mu.Unlock()
	for _, q := range batch {
		if q != me {
			q.wake <- nil
		}
	}
	if next != nil {
		next[0].wake <- next
	}
}

// proposeEntry appends a batch as one entry, waits for it to apply, and sets
// every proposal's result or error. Proposals whose deadline has passed
// are answered so and left out: this is the last moment before the log.
func (p *proposer) proposeEntry(batch []*proposal) {
	if batch = p.dropExpired(batch); len(batch) == 0 {
		return
	}
	answer := func(e *schema.Error) {
		for _, q := range batch {
			q.err = e
		}
	}
	entry := batch[0].data
	if len(batch) > 1 {
		cmds := make([][]byte, len(batch))
		for i, q := range batch {
			cmds[i] = q.data
		}
		var err error
		if entry, err = fsm.EncodeBatch(cmds); err != nil {
			answer(schema.Errorf(schema.ErrInternal, "%v", err))
			return
		}
	}
	f := p.apply(entry)
	if err := replica.Await(p.stop, f); err != nil {
		if err == p.stop.Err() {
			err = raft.ErrRaftShutdown // not answered before the node stopped
		}
		answer(RaftError(err))
		return
	}
	switch r := f.Response().(type) {
	case *fsm.Result:
		if len(batch) == 1 {
			batch[0].res = r
			return
		}
	case []fsm.Result:
		if len(batch) > 1 && len(r) == len(batch) {
			for i, q := range batch {
				q.res = &r[i]
			}
			return
		}
	}
	answer(schema.Errorf(schema.ErrInternal, "unexpected apply response %T for %d commands", f.Response(), len(batch)))
}

// dropExpired answers the proposals of batch whose deadline has passed and
// returns the others, batch itself when there are none to drop.
func (p *proposer) dropExpired(batch []*proposal) []*proposal {
	var now time.Time
	var live []*proposal // nil until a proposal is dropped
	for i, q := range batch {
		expired := false
		if !q.deadline.IsZero() {
			if now.IsZero() {
				now = p.clock()
			}
			expired = now.After(q.deadline)
		}
		switch {
		case expired:
			q.err = decode.DeadlinePassed(now.Sub(q.deadline))
			if live == nil {
				live = append(make([]*proposal, 0, len(batch)-1), batch[:i]...)
			}
		case live != nil:
			live = append(live, q)
		}
	}
	if live == nil {
		return batch
	}
	return live
}

// propose stamps a command with the lease clock, appends it to the Raft log
// (alone, or in one entry with concurrent requests' commands: proposer.go)
// and returns what applying it produced. With an idempotency key, a retry
// of the same request returns the first reply (Result.Cached).
//
// The stamp is taken here, when the request proposes, not when its batch
// leaves: a keep-alive sent at t is stamped no earlier than t either way,
// so both keep the lease until at least t + ttl; the earlier stamp is the
// closer one, and it keeps a command that goes alone byte for byte the
// entry it always was.
func (s *Server) Propose(body any, idempotencyKey string) (*fsm.Result, *schema.Error) {
	return s.proposeUntil(fsm.DefaultTenant, body, idempotencyKey, time.Time{})
}

// proposeUntil is propose for a request with a deadline: its command does
// not enter the log once the deadline has passed (zero: no deadline).
func (s *Server) proposeUntil(tenant string, body any, idempotencyKey string, deadline time.Time) (*fsm.Result, *schema.Error) {
	now, ok := s.node.LeaseNow()
	if !ok {
		return nil, schema.Errorf(schema.ErrNotLeader, "this node is not the leader")
	}
	// A transaction's deletes say "txn" once every member records that
	// cause; until then they say "delete", as before.
	if t, ok := body.(*fsm.Txn); ok && s.node.AllRead(fsm.LogFormatTxnCause) {
		t.MarkDeletes()
	}
	// During a rolling upgrade a member on an older release could not apply
	// the newer commands: they wait until every member reads them.
	need := fsm.RequiredLogFormat(body)
	if tenant != fsm.DefaultTenant {
		need = max(need, fsm.LogFormatTenant)
	}
	if need > fsm.LogFormatBatch && !s.node.AllRead(need) {
		return nil, schema.Errorf(schema.ErrUnavailable, "not every member of the cluster has said it runs a release that applies this request (log format %d); retry once every node runs this release", need)
	}
	data, err := fsm.EncodeFor(now, tenant, idempotencyKey, body)
	if err != nil {
		return nil, schema.Errorf(schema.ErrInternal, "%v", err)
	}
	start := time.Now()
	res, e := s.proposer.propose(data, deadline)
	if e != nil {
		return nil, e
	}
	failpoint.Inject(failpoint.BeforeReply)
	// From proposing to the result, the wait for a batch included.
	s.cfg.ApplyDuration.Observe(time.Since(start).Seconds())
	if res.Err != nil {
		if errors.Is(res.Err, fsm.ErrBadCommand) {
			s.cfg.Log.Error("state machine rejected a command", "err", res.Err)
		}
		return nil, errorFor(res.Err)
	}
	return res, nil
}

// RaftError maps Raft's errors to retryable wire errors: 503 only where
// nothing was written (ErrNotLeader, ErrEnqueueTimeout: the entry never
// reached the log), 504 outcome_unknown where the entry may be in the log
// and may yet be committed by this node or the next leader (leadership
// lost, a shutdown while it was in flight, anything else).
func RaftError(err error) *schema.Error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return schema.Errorf(schema.ErrNotLeader, "this node is not the leader")
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return schema.Errorf(schema.ErrUnavailable, "the log is busy; nothing was written")
	case errors.Is(err, raft.ErrLeadershipLost):
		return schema.Errorf(schema.ErrOutcomeUnknown, "leadership was lost while the request was in the log; it may or may not be applied: retry with the same idempotency key, or read before retrying")
	case errors.Is(err, raft.ErrRaftShutdown):
		return schema.Errorf(schema.ErrOutcomeUnknown, "the node shut down while the request was in the log; it may or may not be applied: retry with the same idempotency key, or read before retrying")
	}
	return schema.Errorf(schema.ErrOutcomeUnknown, "raft: %v; the request may or may not be applied", err)
}
