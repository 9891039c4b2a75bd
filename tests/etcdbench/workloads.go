package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// The workloads both systems run, with the same keys, values and ttl.
var allWorkloads = []string{"grant", "put", "keepalive", "get", "get-serializable"}

// leaseTTL is the ttl of every lease the workloads grant: long enough that
// none expires during a run.
const leaseTTL = 600

// putKey is the key request n of client i writes in the put workload: each
// client cycles through 1000 keys of its own, on both systems.
func putKey(i, n int) string { return fmt.Sprintf("bench.put.%d.%d", i, n%1000) }

// getKey is key k of client i's 100 keys in a get workload.
func getKey(w string, i, k int) string { return fmt.Sprintf("bench.%s.%d.%d", w, i, k) }

// value is the value every put writes: a JSON string of valueBytes bytes,
// quotes included, stored as the same bytes by both systems.
func value(valueBytes int) string { return `"` + strings.Repeat("v", max(valueBytes-2, 0)) + `"` }

// perClient runs f for every client index at once and joins the errors.
func perClient(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(i); err != nil {
				errs[i] = fmt.Errorf("client %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// concordLoad is the load generator's side of Concord: one NATS connection
// per client, client i on server i mod n, requests as `concord bench` sends
// them (JSON over NATS request/reply, the reply decoded and checked).
type concordLoad struct {
	conns []*nats.Conn
	names subjects.Names
	value json.RawMessage
	// keepaliveIDs are the leases the keepalive workload renewed, one per
	// client; the echo workload sends the same request bytes.
	keepaliveIDs []int64
}

func newConcordLoad(cfg *config, urls []string) (*concordLoad, error) {
	names, _ := subjects.New(subjects.DefaultPrefix) // the default prefix is valid
	l := &concordLoad{names: names, value: json.RawMessage(value(cfg.valueBytes))}
	for i := range cfg.clients {
		url := urls[i%len(urls)]
		nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("concord-bench-%d", i)))
		if err != nil {
			l.close()
			return nil, fmt.Errorf("connect client %d to %s: %w", i, url, err)
		}
		l.conns = append(l.conns, nc)
	}
	return l, nil
}

func (l *concordLoad) close() {
	for _, nc := range l.conns {
		nc.Close()
	}
}

// call sends one request and decodes the reply into out. An error reply
// becomes an error naming the subject, code and description.
func call(ctx context.Context, nc *nats.Conn, subject string, req, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: encode request: %w", subject, err)
	}
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	if code := msg.Header.Get(schema.HeaderErrorCode); code != "" {
		return fmt.Errorf("%s: %s %s", subject, code, msg.Header.Get(schema.HeaderError))
	}
	if err := schema.DecodeJSON(msg.Data, out); err != nil {
		return fmt.Errorf("%s: decode reply %.200q: %w", subject, msg.Data, err)
	}
	return nil
}

func (l *concordLoad) grant(ctx context.Context, nc *nats.Conn) (int64, error) {
	var g schema.LeaseGrantReply
	subject := l.names.Request(subjects.LeaseGrant)
	if err := call(ctx, nc, subject, schema.LeaseGrantRequest{TTL: leaseTTL}, &g); err != nil {
		return 0, err
	}
	if g.ID <= 0 {
		return 0, fmt.Errorf("%s: reply has lease id %d", subject, g.ID)
	}
	return g.ID, nil
}

// setup prepares workload w on every client (leases, keys to read) and
// returns each client's request.
func (l *concordLoad) setup(ctx context.Context, w string) ([]opFunc, error) {
	ops := make([]opFunc, len(l.conns))
	if w == "keepalive" {
		l.keepaliveIDs = make([]int64, len(l.conns))
	}
	err := perClient(len(l.conns), func(i int) error {
		nc := l.conns[i]
		var lease int64
		if w != "grant" && w != "echo" {
			var err error
			if lease, err = l.grant(ctx, nc); err != nil {
				return err
			}
		}
		switch w {
		case "grant":
			ops[i] = func(ctx context.Context, _ int) error {
				_, err := l.grant(ctx, nc)
				return err
			}
		case "put":
			subject := l.names.Request(subjects.KVPut)
			ops[i] = func(ctx context.Context, n int) error {
				key := putKey(i, n)
				var p schema.KVPutReply
				if err := call(ctx, nc, subject, schema.KVPutRequest{Key: key, Value: l.value, Lease: &lease}, &p); err != nil {
					return err
				}
				if p.Revision <= 0 {
					return fmt.Errorf("%s %s: reply has revision %d", subject, key, p.Revision)
				}
				return nil
			}
		case "keepalive":
			l.keepaliveIDs[i] = lease
			subject := l.names.Request(subjects.LeaseKeepAlive)
			ops[i] = func(ctx context.Context, _ int) error {
				var k schema.LeaseKeepAliveReply
				if err := call(ctx, nc, subject, schema.LeaseKeepAliveRequest{ID: lease}, &k); err != nil {
					return err
				}
				if k.ID != lease || k.TTL <= 0 {
					return fmt.Errorf("%s %d: reply renews lease %d, ttl %d", subject, lease, k.ID, k.TTL)
				}
				return nil
			}
		case "get", "get-serializable":
			keys := make([]string, 100)
			for k := range keys {
				keys[k] = getKey(w, i, k)
				var p schema.KVPutReply
				if err := call(ctx, nc, l.names.Request(subjects.KVPut), schema.KVPutRequest{Key: keys[k], Value: l.value, Lease: &lease}, &p); err != nil {
					return err
				}
			}
			subject := l.names.Request(subjects.KVGet)
			serializable := w == "get-serializable"
			ops[i] = func(ctx context.Context, n int) error {
				key := keys[n%len(keys)]
				var g schema.KVGetReply
				if err := call(ctx, nc, subject, schema.KVGetRequest{Key: &key, Serializable: serializable}, &g); err != nil {
					return err
				}
				if len(g.KVs) != 1 || g.KVs[0].Key != key {
					return fmt.Errorf("%s %s: reply has %d records, want the key", subject, key, len(g.KVs))
				}
				return nil
			}
		case "echo":
			// The keep-alive request, byte for byte, to a responder that
			// sends it back: the same client work (encode, request,
			// decode, check) with no Concord behind the subject.
			id := int64(1000000 + i) // as long as a lease id after the grant workload
			if l.keepaliveIDs != nil {
				id = l.keepaliveIDs[i]
			}
			ops[i] = func(ctx context.Context, _ int) error {
				var k schema.LeaseKeepAliveRequest
				if err := call(ctx, nc, echoSubject, schema.LeaseKeepAliveRequest{ID: id}, &k); err != nil {
					return err
				}
				if k.ID != id {
					return fmt.Errorf("%s: echo of lease %d says %d", echoSubject, id, k.ID)
				}
				return nil
			}
		default:
			return fmt.Errorf("unknown workload %q", w)
		}
		return nil
	})
	return ops, err
}

// etcdLoad is the load generator's side of etcd: one official etcd client
// (its own gRPC connection) per client, client i on member i mod n.
type etcdLoad struct {
	clients []*clientv3.Client
	value   string
	// cleanup closes what the last setup opened (keep-alive streams).
	cleanup func()
}

func newEtcdLoad(cfg *config, endpoints []string) (*etcdLoad, error) {
	l := &etcdLoad{value: value(cfg.valueBytes), cleanup: func() {}}
	for i := range cfg.clients {
		c, err := newEtcdClient(endpoints[i%len(endpoints)])
		if err != nil {
			l.close()
			return nil, fmt.Errorf("client %d: %w", i, err)
		}
		l.clients = append(l.clients, c)
	}
	return l, nil
}

func (l *etcdLoad) close() {
	l.cleanup()
	for _, c := range l.clients {
		c.Close()
	}
}

// setup prepares workload w on every client and returns each client's
// request.
func (l *etcdLoad) setup(ctx context.Context, w string) ([]opFunc, error) {
	l.cleanup()
	ops := make([]opFunc, len(l.clients))
	streams := make([]context.CancelFunc, len(l.clients))
	l.cleanup = func() {
		for _, cancel := range streams {
			if cancel != nil {
				cancel()
			}
		}
	}
	err := perClient(len(l.clients), func(i int) error {
		c := l.clients[i]
		var lease clientv3.LeaseID
		if w != "grant" {
			g, err := c.Grant(ctx, leaseTTL)
			if err != nil {
				return fmt.Errorf("grant: %w", err)
			}
			lease = g.ID
		}
		switch w {
		case "grant":
			ops[i] = func(ctx context.Context, _ int) error {
				g, err := c.Grant(ctx, leaseTTL)
				if err != nil {
					return fmt.Errorf("grant: %w", err)
				}
				if g.ID == 0 {
					return errors.New("grant: reply has lease id 0")
				}
				return nil
			}
		case "put":
			ops[i] = func(ctx context.Context, n int) error {
				key := putKey(i, n)
				p, err := c.Put(ctx, key, l.value, clientv3.WithLease(lease))
				if err != nil {
					return fmt.Errorf("put %s: %w", key, err)
				}
				if p.Header.Revision <= 0 {
					return fmt.Errorf("put %s: reply has revision %d", key, p.Header.Revision)
				}
				return nil
			}
		case "keepalive":
			// A keep-alive stream is how etcd's own client renews
			// (clientv3's KeepAlive holds one per client): one message
			// each way per renewal, the cheapest path etcd offers. The
			// loop keeps one renewal in flight per client, as on Concord.
			sctx, cancel := context.WithCancel(ctx)
			streams[i] = cancel
			s, err := pb.NewLeaseClient(c.ActiveConnection()).LeaseKeepAlive(sctx)
			if err != nil {
				return fmt.Errorf("keep-alive stream: %w", err)
			}
			ops[i] = func(ctx context.Context, _ int) error {
				if err := s.Send(&pb.LeaseKeepAliveRequest{ID: int64(lease)}); err != nil {
					return fmt.Errorf("keep-alive %x: send: %w", lease, err)
				}
				k, err := s.Recv()
				if err != nil {
					return fmt.Errorf("keep-alive %x: receive: %w", lease, err)
				}
				if k.ID != int64(lease) || k.TTL <= 0 {
					return fmt.Errorf("keep-alive %x: reply renews lease %x, ttl %d", lease, k.ID, k.TTL)
				}
				return nil
			}
		case "get", "get-serializable":
			keys := make([]string, 100)
			for k := range keys {
				keys[k] = getKey(w, i, k)
				if _, err := c.Put(ctx, keys[k], l.value, clientv3.WithLease(lease)); err != nil {
					return fmt.Errorf("put %s: %w", keys[k], err)
				}
			}
			var opts []clientv3.OpOption
			if w == "get-serializable" {
				opts = append(opts, clientv3.WithSerializable())
			}
			ops[i] = func(ctx context.Context, n int) error {
				key := keys[n%len(keys)]
				g, err := c.Get(ctx, key, opts...)
				if err != nil {
					return fmt.Errorf("get %s: %w", key, err)
				}
				if len(g.Kvs) != 1 || string(g.Kvs[0].Key) != key {
					return fmt.Errorf("get %s: reply has %d records, want the key", key, len(g.Kvs))
				}
				return nil
			}
		default:
			return fmt.Errorf("unknown workload %q", w)
		}
		return nil
	})
	return ops, err
}
