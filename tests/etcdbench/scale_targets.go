package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// scaleTarget is one system as the scale phases use it: the same
// operations on Concord (NATS request/reply with Concord's wire types) and
// on etcd (the official client), each checked.
type scaleTarget interface {
	// open connects the clients the phases use; close closes them (and
	// the probe's). A restart closes and opens again.
	open() error
	close()
	// put writes key with the run's value on client c.
	put(ctx context.Context, c int, key string) error
	// count counts every key, without reading them.
	count(ctx context.Context) (int64, error)
	// readPass reads every key under readPrefix in pages of the run's
	// page limit, linearizably, on client c.
	readPass(ctx context.Context, c int) (keys, pages int, err error)
	// grant grants a lease of ttl seconds on client c.
	grant(ctx context.Context, c int, ttl int) (int64, error)
	// leaseLeft says whether any lease is left; last is a lease the
	// target may ask about first, as the cheaper question.
	leaseLeft(ctx context.Context, last int64) (bool, error)
	// renew keeps ids alive, every lease renewed every period, until the
	// renewal is stopped.
	renew(ctx context.Context, ids []int64, every time.Duration) *renewal
	// probe sends one linearizable get of key on a connection of its own
	// (made again after a failure) and succeeds if it answers with key.
	probe(ctx context.Context, key string) error
	// addr is the server's client address, host:port.
	addr() string
}

// scaleConns is how many clients a target opens: enough for the load and
// for the puts beside the readers, and for the readers when they run in
// this process.
func (cfg *scaleConfig) scaleConns() int {
	readers := 0
	if cfg.readersInProcess {
		readers = cfg.readers
	}
	return max(cfg.clients, cfg.putClients+readers)
}

// renewal is a set of leases being kept alive in the background.
type renewal struct {
	renewed atomic.Int64 // lease renewals answered
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	err     error // the first failure
}

func newRenewal(ctx context.Context) (*renewal, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &renewal{cancel: cancel}, ctx
}

// fail records the first failure; failures after stop are not failures.
func (r *renewal) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// failed returns the first failure so far.
func (r *renewal) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// stop ends the renewals and returns the first failure.
func (r *renewal) stop() error {
	r.cancel()
	r.wg.Wait()
	return r.failed()
}

// every runs f now and then once per period, each run starting on the
// period's grid (a late run does not push the next ones back), until ctx
// ends.
func every(ctx context.Context, period time.Duration, f func()) {
	next := time.Now()
	for ctx.Err() == nil {
		f()
		next = next.Add(period)
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
	}
}

// tcpUp says whether something accepts connections at addr.
func tcpUp(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// concordTarget is Concord behind one NATS URL.
type concordTarget struct {
	cfg     *scaleConfig
	url     string
	names   subjects.Names
	value   []byte
	conns   []*nats.Conn
	probeNC *nats.Conn
}

func newConcordTarget(cfg *scaleConfig, url string) *concordTarget {
	names, _ := subjects.New(subjects.DefaultPrefix) // the default prefix is valid
	return &concordTarget{cfg: cfg, url: url, names: names, value: []byte(value(cfg.valueBytes))}
}

func (t *concordTarget) addr() string { return strings.TrimPrefix(t.url, "nats://") }

func (t *concordTarget) open() error {
	for i := range t.cfg.scaleConns() {
		nc, err := nats.Connect(t.url, nats.Name(fmt.Sprintf("concord-bench-scale-%d", i)))
		if err != nil {
			t.close()
			return fmt.Errorf("connect client %d to %s: %w", i, t.url, err)
		}
		t.conns = append(t.conns, nc)
	}
	return nil
}

func (t *concordTarget) close() {
	for _, nc := range t.conns {
		nc.Close()
	}
	t.conns = nil
	if t.probeNC != nil {
		t.probeNC.Close()
		t.probeNC = nil
	}
}

func (t *concordTarget) conn(c int) *nats.Conn { return t.conns[c%len(t.conns)] }

func (t *concordTarget) put(ctx context.Context, c int, key string) error {
	var p schema.KVPutReply
	if err := call(ctx, t.conn(c), t.names.Request(subjects.KVPut), schema.KVPutRequest{Key: key, Value: t.value}, &p); err != nil {
		return err
	}
	if p.Revision <= 0 {
		return fmt.Errorf("put %s: reply has revision %d", key, p.Revision)
	}
	return nil
}

func (t *concordTarget) count(ctx context.Context) (int64, error) {
	all := ""
	var g schema.KVGetReply
	if err := call(ctx, t.conn(0), t.names.Request(subjects.KVGet), schema.KVGetRequest{Prefix: &all, CountOnly: true}, &g); err != nil {
		return 0, err
	}
	if len(g.KVs) != 0 {
		return 0, fmt.Errorf("count_only read returned %d records", len(g.KVs))
	}
	return g.Count, nil
}

func (t *concordTarget) readPass(ctx context.Context, c int) (keys, pages int, err error) {
	prefix := readPrefix
	req := schema.KVGetRequest{Prefix: &prefix, Limit: t.cfg.pageLimit}
	subject := t.names.Request(subjects.KVGet)
	for {
		var g schema.KVGetReply
		if err := call(ctx, t.conn(c), subject, req, &g); err != nil {
			return keys, pages, err
		}
		pages++
		keys += len(g.KVs)
		if !g.More {
			return keys, pages, nil
		}
		if len(g.KVs) == 0 {
			return keys, pages, fmt.Errorf("read %s after %q: an empty page says more", prefix, req.After)
		}
		req.After = g.KVs[len(g.KVs)-1].Key
	}
}

func (t *concordTarget) grant(ctx context.Context, c int, ttl int) (int64, error) {
	var g schema.LeaseGrantReply
	if err := call(ctx, t.conn(c), t.names.Request(subjects.LeaseGrant), schema.LeaseGrantRequest{TTL: int64(ttl)}, &g); err != nil {
		return 0, err
	}
	if g.ID <= 0 {
		return 0, fmt.Errorf("grant: reply has lease id %d", g.ID)
	}
	return g.ID, nil
}

// leaseLeft asks for the first lease in id order: any lease left shows.
func (t *concordTarget) leaseLeft(ctx context.Context, _ int64) (bool, error) {
	var l schema.LeaseListReply
	if err := call(ctx, t.conn(0), t.names.Request(subjects.LeaseList), schema.LeaseListRequest{Limit: 1}, &l); err != nil {
		return false, err
	}
	return len(l.Leases) > 0, nil
}

// renew sends one keepalive_many per chunk of at most renewChunk ids,
// all chunks at once on one connection, every period.
func (t *concordTarget) renew(ctx context.Context, ids []int64, period time.Duration) *renewal {
	r, ctx := newRenewal(ctx)
	nc := t.conn(0)
	subject := t.names.Request(subjects.LeaseKeepAliveMany)
	parts := chunks(ids, renewChunk)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		every(ctx, period, func() {
			var wg sync.WaitGroup
			for _, part := range parts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rctx, cancel := context.WithTimeout(ctx, period)
					defer cancel()
					var k schema.LeaseKeepAliveManyReply
					if err := call(rctx, nc, subject, schema.LeaseKeepAliveManyRequest{IDs: part}, &k); err != nil {
						r.fail(ctx, err)
						return
					}
					if len(k.NotFound) > 0 || len(k.Leases) != len(part) {
						r.fail(ctx, fmt.Errorf("keepalive_many of %d leases: %d renewed, %d not found (first %v)",
							len(part), len(k.Leases), len(k.NotFound), k.NotFound[:min(1, len(k.NotFound))]))
						return
					}
					r.renewed.Add(int64(len(k.Leases)))
				}()
			}
			wg.Wait()
		})
	}()
	return r
}

// probe keeps its connection between attempts: while the node restores,
// NATS answers "no responders" at once, and later the node 503.
func (t *concordTarget) probe(ctx context.Context, key string) error {
	if t.probeNC == nil || t.probeNC.IsClosed() {
		nc, err := nats.Connect(t.url, nats.Name("concord-bench-scale-probe"), nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			return err
		}
		t.probeNC = nc
	}
	var g schema.KVGetReply
	if err := call(ctx, t.probeNC, t.names.Request(subjects.KVGet), schema.KVGetRequest{Key: &key}, &g); err != nil {
		if !t.probeNC.IsConnected() {
			t.probeNC.Close()
		}
		return err
	}
	if len(g.KVs) != 1 || g.KVs[0].Key != key {
		return fmt.Errorf("get %s: %d records", key, len(g.KVs))
	}
	return nil
}

// etcdTarget is one etcd member behind its client address.
type etcdTarget struct {
	cfg      *scaleConfig
	endpoint string
	value    string
	clients  []*clientv3.Client
	probeC   *clientv3.Client
	lastGone bool // leaseLeft found its last lease gone
}

func newEtcdTarget(cfg *scaleConfig, endpoint string) *etcdTarget {
	return &etcdTarget{cfg: cfg, endpoint: endpoint, value: value(cfg.valueBytes)}
}

func (t *etcdTarget) addr() string { return t.endpoint }

func (t *etcdTarget) open() error {
	for i := range t.cfg.scaleConns() {
		c, err := newEtcdClient(t.endpoint)
		if err != nil {
			t.close()
			return fmt.Errorf("client %d: %w", i, err)
		}
		t.clients = append(t.clients, c)
	}
	return nil
}

func (t *etcdTarget) close() {
	for _, c := range t.clients {
		c.Close()
	}
	t.clients = nil
	if t.probeC != nil {
		t.probeC.Close()
		t.probeC = nil
	}
}

func (t *etcdTarget) client(c int) *clientv3.Client { return t.clients[c%len(t.clients)] }

func (t *etcdTarget) put(ctx context.Context, c int, key string) error {
	p, err := t.client(c).Put(ctx, key, t.value)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if p.Header.Revision <= 0 {
		return fmt.Errorf("put %s: reply has revision %d", key, p.Header.Revision)
	}
	return nil
}

func (t *etcdTarget) count(ctx context.Context) (int64, error) {
	g, err := t.client(0).Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	return g.Count, nil
}

func (t *etcdTarget) readPass(ctx context.Context, c int) (keys, pages int, err error) {
	end := clientv3.GetPrefixRangeEnd(readPrefix)
	start := readPrefix
	for {
		g, err := t.client(c).Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(int64(t.cfg.pageLimit)))
		if err != nil {
			return keys, pages, fmt.Errorf("read %s from %q: %w", readPrefix, start, err)
		}
		pages++
		keys += len(g.Kvs)
		if !g.More {
			return keys, pages, nil
		}
		if len(g.Kvs) == 0 {
			return keys, pages, fmt.Errorf("read %s from %q: an empty page says more", readPrefix, start)
		}
		start = string(g.Kvs[len(g.Kvs)-1].Key) + "\x00"
	}
}

func (t *etcdTarget) grant(ctx context.Context, c int, ttl int) (int64, error) {
	g, err := t.client(c).Grant(ctx, int64(ttl))
	if err != nil {
		return 0, fmt.Errorf("grant: %w", err)
	}
	if g.ID == 0 {
		return 0, errors.New("grant: reply has lease id 0")
	}
	return int64(g.ID), nil
}

// leaseLeft asks about last alone until it is gone (the list of every
// lease is a large reply, and etcd sorts it for each request), then for the
// list.
func (t *etcdTarget) leaseLeft(ctx context.Context, last int64) (bool, error) {
	if !t.lastGone {
		ttl, err := t.client(0).TimeToLive(ctx, clientv3.LeaseID(last))
		if err != nil {
			return false, fmt.Errorf("time to live of %x: %w", last, err)
		}
		if ttl.TTL != -1 { // -1: not found
			return true, nil
		}
		t.lastGone = true
	}
	l, err := t.client(0).Leases(ctx)
	if err != nil {
		return false, fmt.Errorf("leases: %w", err)
	}
	return len(l.Leases) > 0, nil
}

// renew renews as etcd's client does, over keep-alive streams (one message
// each way per lease and renewal), with one stream per renewChunk leases
// on one connection, every lease once a period.
func (t *etcdTarget) renew(ctx context.Context, ids []int64, period time.Duration) *renewal {
	r, ctx := newRenewal(ctx)
	lc := pb.NewLeaseClient(t.client(0).ActiveConnection())
	for _, part := range chunks(ids, renewChunk) {
		s, err := lc.LeaseKeepAlive(ctx)
		if err != nil {
			r.fail(ctx, fmt.Errorf("keep-alive stream: %w", err))
			continue
		}
		r.wg.Add(2)
		go func() {
			defer r.wg.Done()
			for {
				k, err := s.Recv()
				if err != nil {
					r.fail(ctx, fmt.Errorf("keep-alive: receive: %w", err))
					return
				}
				if k.TTL <= 0 {
					r.fail(ctx, fmt.Errorf("keep-alive of %x: not found (ttl %d)", k.ID, k.TTL))
					continue
				}
				r.renewed.Add(1)
			}
		}()
		go func() {
			defer r.wg.Done()
			every(ctx, period, func() {
				for _, id := range part {
					if err := s.Send(&pb.LeaseKeepAliveRequest{ID: id}); err != nil {
						r.fail(ctx, fmt.Errorf("keep-alive %x: send: %w", id, err))
						return
					}
				}
			})
		}()
	}
	return r
}

// probe uses a client of its own, made again after a failure so that
// gRPC's reconnection back-off does not delay the answer.
func (t *etcdTarget) probe(ctx context.Context, key string) error {
	if t.probeC == nil {
		c, err := newEtcdClient(t.endpoint)
		if err != nil {
			return err
		}
		t.probeC = c
	}
	g, err := t.probeC.Get(ctx, key)
	if err == nil && (len(g.Kvs) != 1 || string(g.Kvs[0].Key) != key) {
		err = fmt.Errorf("get %s: %d records", key, len(g.Kvs))
	}
	if err != nil {
		t.probeC.Close()
		t.probeC = nil
	}
	return err
}
