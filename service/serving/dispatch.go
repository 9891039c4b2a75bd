package serving

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/subjects"
)

// Request dispatch: the leader's subscription to the request subjects
// (through the nats micro service, micro.go), the worker pool that runs
// the handlers, and what every request goes through whatever its handler:
// the bus-conflict fence, panic recovery, the reply and its count.

// queueGroup makes NATS deliver each request to one subscriber, which
// matters during a leadership hand-over when two nodes briefly subscribe.
const queueGroup = "concord"

// subscribe starts serving the request subjects, as the nats micro service
// that `nats micro ls` lists (see micro.go); the leader calls it on gaining
// leadership.
func (s *Server) Subscribe() error {
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
	if err := s.cfg.Conn.Flush(); err != nil {
		return err
	}
	// From now on a request reaches this subscription, so the node's
	// standby leaves whatever arrives later to it, and stops listening at
	// once (Options.OnServing).
	s.servingSince.Store(time.Now().UnixNano())
	if s.cfg.OnServing != nil {
		s.cfg.OnServing()
	}
	return nil
}

// unsubscribe stops serving the request subjects and drops the micro
// service from discovery. micro's Stop drains rather than unsubscribes:
// requests already delivered are still dispatched, and get not_leader (a
// retry) instead of no reply at all.
func (s *Server) Unsubscribe() {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	if s.microSvc == nil {
		return
	}
	s.servingSince.Store(0)
	if err := s.microSvc.Stop(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.cfg.Log.Warn("stop the nats micro service", "err", err)
	}
	s.microSvc = nil
}

// dispatch hands the request to a worker: a subscription callback runs
// serially, and serial handling would cap throughput at one Raft round trip
// per request. A tenant's request that is refused outright (its account
// may not call the endpoint, it is moving, it is over its rate) is
// answered here instead, without a worker: a tenant flooding past its
// rate then costs the others a header read and a reply per request, not
// a worker's turn; and a refusal for the rate is held a while before it
// is answered (refusalHold), so that the flooding clients slow down.
func (s *Server) dispatch(ep subjects.Endpoint, m *nats.Msg, h handler) {
	tenant, e, overRate := s.admit(ep, m)
	if e == nil {
		s.pool.submit(job{ep: ep, m: m, h: h, tenant: tenant})
		return
	}
	r := heldRefusal{ep: ep, m: m, e: e, tenant: tenant, start: time.Now()}
	if overRate && m.Reply != "" {
		deadline, _ := decode.Deadline(m, r.start)
		// Held, a refusal keeps only what its answer needs: not the
		// body, which may be megabytes, times thousands held.
		held := r
		held.m = &nats.Msg{Subject: m.Subject, Reply: m.Reply}
		if s.refusals.hold(held, r.start, deadline) {
			return
		}
	}
	s.answerRefusal(r)
}

// answerRefusal answers a request refused without being served, and
// counts it, with the time from its arrival; for a held refusal, from
// when it fell due: the hold is deliberate, and counted in the request
// latencies it would read as a second-long request whenever a tenant is
// over its rate.
func (s *Server) answerRefusal(r heldRefusal) {
	e := s.Respond(r.m, nil, r.e)
	from := r.start
	if !r.due.IsZero() {
		from = r.due
	}
	s.reqStats.observe(r.ep, time.Since(from), e)
	s.countTenant(r.tenant, e)
}

// admit returns the tenant of a request, and the error it gets without
// being served: one requestTenant or checkTenant gives; overRate tells
// that the error is the tenant's rate.
func (s *Server) admit(ep subjects.Endpoint, m *nats.Msg) (tenant string, e *schema.Error, overRate bool) {
	tenant, e = requestTenant(ep, m)
	if e == nil && tenant != fsm.DefaultTenant {
		e, overRate = s.checkTenant(tenant)
	}
	return tenant, e, overRate
}

// countTenant counts a request of a tenant other than the default one.
func (s *Server) countTenant(tenant string, e *schema.Error) {
	if tenant != fsm.DefaultTenant && s.cfg.TenantRequests != nil {
		s.tenantCounts.count(s.cfg.TenantRequests, s.cfg.TenantLabel, tenant, e)
	}
}

// job is one request waiting for a worker.
type job struct {
	ep subjects.Endpoint // what the request counts toward in reqStats
	m  *nats.Msg
	h  handler
	// tenant is the request's tenant, admitted by dispatch.
	tenant string
}

// workerIdle is how long a worker waits for a request before it exits.
const workerIdle = 10 * time.Second

// handle serves one request on a worker, replies and counts it.
func (s *Server) handle(j job) {
	start := time.Now()
	var reply any
	e := s.fenceError(j.ep)
	if e == nil {
		e = s.node.DiskFullError(j.ep)
	}
	if e == nil {
		_, e = decode.Deadline(j.m, start)
	}
	if e == nil {
		reply, e = s.serve(j.m, j.tenant, j.h)
	}
	// Count what was sent: a reply too large for NATS goes out as an error.
	e = s.Respond(j.m, reply, e)
	if r, ok := reply.(releaser); ok {
		r.release()
	}
	s.reqStats.observe(j.ep, time.Since(start), e)
	s.countTenant(j.tenant, e)
}

// releaser is a reply that holds pooled memory, given back once it is
// sent.
type releaser interface {
	release()
}

// fenceError returns the error every request gets while another cluster
// serves the same prefix on the bus (Node.ConflictError); cluster status still
// answers, so that an operator can see the conflict.
func (s *Server) fenceError(ep subjects.Endpoint) *schema.Error {
	if ep == subjects.ClusterStatus {
		return nil
	}
	return s.node.ConflictError()
}

// requestTenant returns the tenant of a request to ep (decode.Tenant), and
// refuses a tenant the endpoints that act on the whole cluster.
func requestTenant(ep subjects.Endpoint, m *nats.Msg) (string, *schema.Error) {
	tenant, e := decode.Tenant(m)
	if e == nil && tenant != fsm.DefaultTenant && !ep.ForTenants() {
		e = schema.Errorf(schema.ErrForbidden, "%s acts on the whole cluster: only Concord's own account may call it, not account %s", ep, tenant)
	}
	return tenant, e
}

// checkTenant refuses a tenant's request while the tenant moves or after
// it moved (reads too: a moved tenant's data is gone), and takes a token
// from its bucket if its quota sets a rate.
//
// It reads the policy the state machine took after its last apply that
// changed it, not the state: the state's read lock waits for every apply,
// and every request of a tenant passes here.
func (s *Server) checkTenant(tenant string) (e *schema.Error, overRate bool) {
	p := s.sm.TenantPolicy()
	if err := p.Refusal(tenant); err != nil {
		return errorFor(err), false
	}
	rps := p.QuotaOf(tenant).RequestsPerSecond
	if !s.rates.allow(tenant, rps) {
		return rateError(tenant, rps), true
	}
	return nil, false
}

func (s *Server) serve(m *nats.Msg, tenant string, h handler) (reply any, e *schema.Error) {
	defer func() {
		if r := recover(); r != nil {
			s.cfg.Log.Error("handler panic", "subject", m.Subject, "panic", r, "stack", string(debug.Stack()))
			reply, e = nil, schema.Errorf(schema.ErrInternal, "the request could not be handled")
		}
	}()
	// Writes are bounded by raft.Apply's own timeout, so only reads make a
	// deadline of their own (readBarrier.now): a timer per request showed in the
	// keep-alive profile.
	return h(s.ctx, m, tenant)
}

// workerPool runs jobs on long-lived workers, so their stacks stay grown.
// Workers start on demand up to a bound, which bounds memory under
// overload: a job waits for a worker then. A worker that finds no job for
// its idle time, or sees done closed, exits.
type workerPool[J any] struct {
	run    func(J)
	idle   time.Duration
	done   <-chan struct{}
	tokens chan struct{} // one per running worker
	jobs   chan J        // jobs for idle workers
}

// newWorkerPool returns a pool of at most max workers that run run.
func newWorkerPool[J any](max int, idle time.Duration, done <-chan struct{}, run func(J)) *workerPool[J] {
	return &workerPool[J]{run: run, idle: idle, done: done, tokens: make(chan struct{}, max), jobs: make(chan J)}
}

// submit hands j to an idle worker, or to a new one while fewer than max
// run, or else waits for a worker to become free.
func (p *workerPool[J]) submit(j J) {
	select {
	case p.jobs <- j: // an idle worker takes it
		return
	default:
	}
	select {
	case p.tokens <- struct{}{}:
		go p.work(j)
	case p.jobs <- j:
	}
}

func (p *workerPool[J]) work(j J) {
	defer func() { <-p.tokens }()
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	for {
		p.run(j)
		idle.Reset(p.idle)
		select {
		case j = <-p.jobs:
		case <-idle.C:
			return
		case <-p.done:
			return
		}
	}
}
