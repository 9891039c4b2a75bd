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

// handlerFunc serves one request body.
type handlerFunc func(ctx context.Context, data []byte) (any, *schema.Error)

// queueGroup makes NATS deliver each request to one subscriber, which
// matters during a leadership hand-over when two nodes briefly subscribe.
const queueGroup = "concord"

func (s *Service) handlers() map[subjects.Endpoint]handlerFunc {
	return map[subjects.Endpoint]handlerFunc{
		subjects.LeaseGrant:     s.handleGrant,
		subjects.LeaseKeepAlive: s.handleKeepAlive,
		subjects.LeaseRevoke:    s.handleRevoke,
		subjects.LeaseInfo:      s.handleInfo,
		subjects.LeaseList:      s.handleList,
		subjects.KVPut:          s.handlePut,
		subjects.KVGet:          s.handleGet,
		subjects.KVDelete:       s.handleDelete,
	}
}

func (s *Service) subscribe() error {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	for ep, h := range s.handlers() {
		sub, err := s.nc.QueueSubscribe(s.names.Request(ep), queueGroup, func(m *nats.Msg) { s.dispatch(m, h) })
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", s.names.Request(ep), err)
		}
		s.subs = append(s.subs, sub)
	}
	// Make sure the server has the interest before we call ourselves ready.
	return s.nc.Flush()
}

func (s *Service) unsubscribe() {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	for _, sub := range s.subs {
		if err := sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			s.log.Warn("unsubscribe", "subject", sub.Subject, "err", err)
		}
	}
	s.subs = nil
}

// dispatch hands the request to a worker: a subscription callback runs
// serially, and serial handling would cap throughput at one Raft round trip
// per request. Workers are long-lived so their stacks stay grown; they are
// started on demand up to MaxInflight, which bounds memory under overload.
func (s *Service) dispatch(m *nats.Msg, h handlerFunc) {
	j := job{m: m, h: h}
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
	m *nats.Msg
	h handlerFunc
}

// workerIdle is how long a worker waits for a request before it exits.
const workerIdle = 10 * time.Second

func (s *Service) worker(j job) {
	defer func() { <-s.workers }()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		reply, e := s.serve(j.m, j.h)
		s.respond(j.m, reply, e)
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

func (s *Service) serve(m *nats.Msg, h handlerFunc) (reply any, e *schema.Error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("handler panic", "subject", m.Subject, "panic", r, "stack", string(debug.Stack()))
			reply, e = nil, schema.Errorf(schema.ErrInternal, "the request could not be handled")
		}
	}()
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ApplyTimeout)
	defer cancel()
	return h(ctx, m.Data)
}

// propose stamps a command with the lease clock, appends it to the Raft log
// and returns what applying it produced.
func (s *Service) propose(body any) (*fsm.Result, *schema.Error) {
	now, ok := s.clock.now()
	if !ok {
		return nil, schema.Errorf(schema.ErrNotLeader, "this node is not the leader")
	}
	data, err := fsm.Encode(now, body)
	if err != nil {
		return nil, schema.Errorf(schema.ErrInternal, "%v", err)
	}
	f := s.raft.Apply(data, s.cfg.ApplyTimeout)
	if err := f.Error(); err != nil {
		return nil, raftError(err)
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok {
		return nil, schema.Errorf(schema.ErrInternal, "unexpected apply response %T", f.Response())
	}
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

func (s *Service) handleGrant(_ context.Context, data []byte) (any, *schema.Error) {
	cmd, e := s.decodeGrant(data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(cmd)
}

func (s *Service) handleKeepAlive(_ context.Context, data []byte) (any, *schema.Error) {
	cmd, e := s.decodeKeepAlive(data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(cmd)
}

func (s *Service) handleRevoke(_ context.Context, data []byte) (any, *schema.Error) {
	cmd, e := decodeRevoke(data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(cmd)
}

func (s *Service) handlePut(_ context.Context, data []byte) (any, *schema.Error) {
	cmd, e := s.decodePut(data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(cmd)
}

func (s *Service) handleDelete(_ context.Context, data []byte) (any, *schema.Error) {
	cmd, e := s.decodeDelete(data)
	if e != nil {
		return nil, e
	}
	return s.proposeReply(cmd)
}

func (s *Service) proposeReply(cmd any) (any, *schema.Error) {
	res, e := s.propose(cmd)
	if e != nil {
		return nil, e
	}
	return res.Reply, nil
}

// readNow confirms the read may be served and returns the time at which
// remaining lease time is measured.
func (s *Service) readNow(ctx context.Context, serializable bool) (int64, *schema.Error) {
	if !serializable {
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

func (s *Service) handleInfo(ctx context.Context, data []byte) (any, *schema.Error) {
	req, e := decodeInfo(data)
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

func (s *Service) handleList(ctx context.Context, data []byte) (any, *schema.Error) {
	req, e := decodeList(data)
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

// replyHeadroom is kept free below the connection's max payload for the
// reply's envelope and headers.
const replyHeadroom = 16 << 10

func (s *Service) handleGet(ctx context.Context, data []byte) (any, *schema.Error) {
	q, serializable, e := s.decodeGet(data)
	if e != nil {
		return nil, e
	}
	now, e := s.readNow(ctx, serializable)
	if e != nil {
		return nil, e
	}
	q.MaxBytes = int(s.nc.MaxPayload()) - replyHeadroom
	var reply *schema.KVGetReply
	s.sm.read(func(st *fsm.State) { reply = st.Get(q, max(now, st.Now())) })
	return reply, nil
}
