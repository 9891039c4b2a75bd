package service

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// handlerFunc serves one request.
type handlerFunc func(ctx context.Context, m *nats.Msg) (any, *schema.Error)

// queueGroup makes NATS deliver each request to one subscriber, which
// matters during a leadership hand-over when two nodes briefly subscribe.
const queueGroup = "concord"

func (s *Service) handlers() map[subjects.Endpoint]handlerFunc {
	return map[subjects.Endpoint]handlerFunc{
		subjects.LeaseGrant:         s.handleGrant,
		subjects.LeaseKeepAlive:     s.handleKeepAlive,
		subjects.LeaseKeepAliveMany: s.handleKeepAliveMany,
		subjects.KVChanges:          s.handleChanges,
		subjects.LeaseRevoke:        s.handleRevoke,
		subjects.LeaseInfo:          s.handleInfo,
		subjects.LeaseList:          s.handleList,
		subjects.KVPut:              s.handlePut,
		subjects.KVGet:              s.handleGet,
		subjects.KVDelete:           s.handleDelete,
		subjects.KVTxn:              s.handleTxn,

		subjects.ClusterJoin:     s.handleJoin,
		subjects.ClusterRemove:   s.handleRemove,
		subjects.ClusterStatus:   s.handleStatus,
		subjects.ClusterSnapshot: s.handleSnapshot,

		subjects.ClusterBackup:      s.handleBackup,
		subjects.ClusterBackupChunk: s.handleBackupChunk, // replies with raw bytes (backup.go)
	}
}

// subscribe starts serving the request subjects, as the nats micro service
// that `nats micro ls` lists (see micro.go); the leader calls it on gaining
// leadership.
func (s *Service) subscribe() error {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	if s.microSvc != nil {
		return nil // already serving
	}
	svc, err := s.addMicroService(s.handlers())
	if svc != nil {
		s.microSvc = svc // stopped by unsubscribe, even after a partial failure
	}
	if err != nil {
		return fmt.Errorf("register the nats micro service: %w", err)
	}
	// Make sure the server has the interest before we call ourselves ready.
	return s.nc.Flush()
}

// unsubscribe stops serving the request subjects and drops the micro
// service from discovery. micro's Stop drains rather than unsubscribes:
// requests already delivered are still dispatched, and get not_leader (a
// retry) instead of no reply at all.
func (s *Service) unsubscribe() {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	if s.microSvc == nil {
		return
	}
	if err := s.microSvc.Stop(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.log.Warn("stop the nats micro service", "err", err)
	}
	s.microSvc = nil
}

// dispatch hands the request to a worker: a subscription callback runs
// serially, and serial handling would cap throughput at one Raft round trip
// per request. Workers are long-lived so their stacks stay grown; they are
// started on demand up to MaxInflight, which bounds memory under overload.
func (s *Service) dispatch(ep subjects.Endpoint, m *nats.Msg, h handlerFunc) {
	j := job{ep: ep, m: m, h: h}
	select {
	case s.jobs <- j: // an idle worker takes it
		return
	default:
	}
	select {
	case s.workers <- struct{}{}:
		go s.worker(j)
	case s.jobs <- j:
	}
}

// job is one request waiting for a worker.
type job struct {
	ep subjects.Endpoint // what the request counts toward in reqStats
	m  *nats.Msg
	h  handlerFunc
}

// workerIdle is how long a worker waits for a request before it exits.
const workerIdle = 10 * time.Second

func (s *Service) worker(j job) {
	defer func() { <-s.workers }()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		start := time.Now()
		var reply any
		e := s.fenced(j.ep)
		if e == nil {
			reply, e = s.serve(j.m, j.h)
		}
		// Count what was sent: a reply too large for NATS goes out as an error.
		e = s.respond(j.m, reply, e)
		took := time.Since(start)
		s.reqStats.observe(j.ep, took, e)
		idle.Reset(workerIdle)
		select {
		case j = <-s.jobs:
		case <-idle.C:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// fenced returns the error every request gets while another cluster
// serves the same prefix on the bus (busguard.go); cluster status still
// answers, so that an operator can see the conflict.
func (s *Service) fenced(ep subjects.Endpoint) *schema.Error {
	if ep == subjects.ClusterStatus {
		return nil
	}
	return s.conflictError()
}

func (s *Service) serve(m *nats.Msg, h handlerFunc) (reply any, e *schema.Error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("handler panic", "subject", m.Subject, "panic", r, "stack", string(debug.Stack()))
			reply, e = nil, schema.Errorf(schema.ErrInternal, "the request could not be handled")
		}
	}()
	// Writes are bounded by raft.Apply's own timeout, so only reads make a
	// deadline of their own (readNow): a timer per request showed in the
	// keep-alive profile.
	return h(s.ctx, m)
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
func (s *Service) propose(body any, idempotencyKey string) (*fsm.Result, *schema.Error) {
	now, ok := s.clock.now()
	if !ok {
		return nil, schema.Errorf(schema.ErrNotLeader, "this node is not the leader")
	}
	data, err := fsm.EncodeKeyed(now, idempotencyKey, body)
	if err != nil {
		return nil, schema.Errorf(schema.ErrInternal, "%v", err)
	}
	start := time.Now()
	res, e := s.proposer.propose(data)
	if e != nil {
		return nil, e
	}
	// From proposing to the result, the wait for a batch included.
	s.metrics.applyDuration.Observe(time.Since(start).Seconds())
	if res.Err != nil {
		if errors.Is(res.Err, fsm.ErrBadCommand) {
			s.log.Error("state machine rejected a command", "err", res.Err)
		}
		return nil, errorFor(res.Err)
	}
	return res, nil
}

// raftError maps Raft's errors to retryable wire errors. ErrNotLeader and
// ErrEnqueueTimeout mean nothing was written; ErrLeadershipLost and
// timeouts mean the outcome is unknown, which the description says.
func raftError(err error) *schema.Error {
	switch {
	case errors.Is(err, raft.ErrNotLeader):
		return schema.Errorf(schema.ErrNotLeader, "this node is not the leader")
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return schema.Errorf(schema.ErrUnavailable, "the log is busy; nothing was written")
	case errors.Is(err, raft.ErrLeadershipLost):
		return schema.Errorf(schema.ErrUnavailable, "leadership was lost; the request may or may not have been applied")
	case errors.Is(err, raft.ErrRaftShutdown):
		return schema.Errorf(schema.ErrUnavailable, "the node is shutting down")
	}
	return schema.Errorf(schema.ErrUnavailable, "raft: %v", err)
}

func (s *Service) handleGrant(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	cmd, e := s.dec.grant(m.Data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(m, cmd, "")
}

func (s *Service) handleKeepAlive(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	cmd, e := s.dec.keepAlive(m.Data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(m, cmd, "")
}

func (s *Service) handleKeepAliveMany(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	cmd, e := s.dec.keepAliveMany(m.Data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(m, cmd, "")
}

func (s *Service) handleChanges(ctx context.Context, m *nats.Msg) (any, *schema.Error) {
	q, e := s.dec.changes(m.Data)
	if e != nil {
		return nil, e
	}
	if _, e := s.readNow(ctx, false); e != nil {
		return nil, e
	}
	q.MaxBytes = int(s.maxPayload) - replyHeadroom
	var reply *schema.KVChangesReply
	var err error
	s.sm.read(func(st *fsm.State) { reply, err = st.Changes(q) })
	if err != nil {
		return nil, errorFor(err)
	}
	return reply, nil
}

func (s *Service) handleRevoke(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	cmd, e := s.dec.revoke(m.Data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(m, cmd, "")
}

func (s *Service) handlePut(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	cmd, key, e := s.dec.put(m.Data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(m, cmd, key)
}

func (s *Service) handleDelete(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	cmd, key, e := s.dec.delete(m.Data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(m, cmd, key)
}

func (s *Service) handleTxn(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	cmd, key, e := s.dec.txn(m.Data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(m, cmd, key)
}

// proposeReply proposes a mutating command under the request's
// idempotency key: the body's idempotency_key field or the
// Concord-Idempotency-Key header (which must agree when both are given).
func (s *Service) proposeReply(m *nats.Msg, cmd any, bodyKey string) (any, *schema.Error) {
	key, e := idempotencyKey(m, bodyKey)
	if e != nil {
		return nil, e
	}
	res, e := s.propose(cmd, key)
	if e != nil {
		return nil, e
	}
	return res.Reply, nil
}

func idempotencyKey(m *nats.Msg, bodyKey string) (string, *schema.Error) {
	key, field := bodyKey, "idempotency_key"
	if h := m.Header.Get(schema.HeaderIdempotencyKey); h != "" {
		if key != "" && key != h {
			return "", invalid("idempotency_key %q and the %s header %q differ: give one of them, or the same key in both", shorten(key), schema.HeaderIdempotencyKey, shorten(h))
		}
		key, field = h, "the "+schema.HeaderIdempotencyKey+" header"
	}
	if len(key) > schema.MaxIdempotencyKeyBytes {
		return "", invalid("%s is %d bytes long, more than the %d allowed", field, len(key), schema.MaxIdempotencyKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", invalid("%s must be ASCII text: letters, digits, punctuation and spaces, without control characters", field)
		}
	}
	return key, nil
}

// readNow confirms the read may be served and returns the time at which
// remaining lease time is measured.
func (s *Service) readNow(ctx context.Context, serializable bool) (int64, *schema.Error) {
	if !serializable {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.ApplyTimeout)
		defer cancel()
		if e := s.reads.wait(ctx); e != nil {
			return 0, e
		}
	}
	now, ok := s.clock.now()
	if !ok {
		return 0, schema.Errorf(schema.ErrNotLeader, "this node is not the leader")
	}
	return now, nil
}

func (s *Service) handleInfo(ctx context.Context, m *nats.Msg) (any, *schema.Error) {
	req, e := s.dec.info(m.Data)
	if e != nil {
		return nil, e
	}
	now, e := s.readNow(ctx, false)
	if e != nil {
		return nil, e
	}
	var info *schema.LeaseInfo
	var err error
	s.sm.read(func(st *fsm.State) { info, err = st.LeaseInfo(req.ID, req.Keys, max(now, st.Now())) })
	if err != nil {
		return nil, errorFor(err)
	}
	return info, nil
}

func (s *Service) handleList(ctx context.Context, m *nats.Msg) (any, *schema.Error) {
	req, e := s.dec.list(m.Data)
	if e != nil {
		return nil, e
	}
	now, e := s.readNow(ctx, false)
	if e != nil {
		return nil, e
	}
	var reply *schema.LeaseListReply
	s.sm.read(func(st *fsm.State) {
		reply = st.LeaseList(req.IncludeAnonymous, req.After, req.Limit, max(now, st.Now()))
	})
	return reply, nil
}

func (s *Service) handleGet(ctx context.Context, m *nats.Msg) (any, *schema.Error) {
	q, serializable, e := s.dec.get(m.Data)
	if e != nil {
		return nil, e
	}
	now, e := s.readNow(ctx, serializable)
	if e != nil {
		return nil, e
	}
	q.MaxBytes = int(s.maxPayload) - replyHeadroom
	var reply *schema.KVGetReply
	s.sm.read(func(st *fsm.State) { reply = st.Get(q, max(now, st.Now())) })
	return reply, nil
}
