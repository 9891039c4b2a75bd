package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// Client talks to one Concord cluster. It is safe for concurrent use.
type Client struct {
	nc    *nats.Conn
	owned bool // Close closes nc
	names subjects.Names
	opts  options

	kaMu sync.Mutex
	ka   *keepAliver
	// renewBatch, when set (by tests), replaces renewBatch as the most
	// leases one keepalive_many names.
	renewBatch int

	denied *denials
	// standby counts the standby answers calls get, to move off a server
	// whose node cannot serve (move.go).
	standby standbyTracker
}

type options struct {
	url         string
	conn        *nats.Conn
	contextName *string
	prefix      string
	natsOpts    []nats.Option
	attempt     time.Duration
}

// Option configures Connect.
type Option func(*options)

// URL connects to NATS at url (comma-separated for several servers).
func URL(url string) Option { return func(o *options) { o.url = url } }

// Conn uses an existing connection; Close leaves it open.
func Conn(nc *nats.Conn) Option { return func(o *options) { o.conn = nc } }

// NATSContext connects with the named nats context (the `nats` CLI's
// configuration); "" means the selected context.
func NATSContext(name string) Option { return func(o *options) { o.contextName = &name } }

// Prefix sets the subject prefix (default "concord").
func Prefix(p string) Option { return func(o *options) { o.prefix = p } }

// NATSOptions adds options to the NATS connection Connect makes.
func NATSOptions(opts ...nats.Option) Option {
	return func(o *options) { o.natsOpts = append(o.natsOpts, opts...) }
}

// AttemptTimeout bounds one attempt of a call (default 2 s); the call as a
// whole is bounded by its context.
func AttemptTimeout(d time.Duration) Option { return func(o *options) { o.attempt = d } }

// Connect returns a client. Without URL, Conn or NATSContext it connects to
// nats.DefaultURL. It chains an error handler onto the connection (the one
// set before still gets every error) to learn of permission violations;
// see ErrPermissionDenied.
func Connect(opts ...Option) (*Client, error) {
	o := options{prefix: subjects.DefaultPrefix, attempt: 2 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	names, err := subjects.New(o.prefix)
	if err != nil {
		return nil, err
	}
	c := &Client{names: names, opts: o}
	natsOpts := append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, o.natsOpts...)
	switch {
	case o.conn != nil:
		c.nc = o.conn
	case o.contextName != nil:
		if c.nc, err = natscontext.Connect(*o.contextName, natsOpts...); err != nil {
			return nil, fmt.Errorf("connect with nats context %q: %w", *o.contextName, err)
		}
		c.owned = true
	default:
		url := o.url
		if url == "" {
			url = nats.DefaultURL
		}
		if c.nc, err = nats.Connect(url, natsOpts...); err != nil {
			return nil, fmt.Errorf("connect to %s: %w", url, err)
		}
		c.owned = true
	}
	c.watchDenials()
	return c, nil
}

// NATS returns the client's connection.
func (c *Client) NATS() *nats.Conn { return c.nc }

// Close stops the sessions' keep-alives (without revoking their leases)
// and closes the connection if Connect made it.
func (c *Client) Close() {
	c.kaMu.Lock()
	if c.ka != nil {
		c.ka.stop()
		c.ka = nil
	}
	c.kaMu.Unlock()
	if c.owned {
		c.nc.Close()
	}
}

// call sends a JSON request with request, with the client's attempt
// timeout, and decodes a success reply into out (unless out is nil).
func (c *Client) call(ctx context.Context, ep subjects.Endpoint, req any, mutating bool, out any) error {
	key := ""
	if mutating {
		key = nuid.Next()
	}
	return c.callKeyed(ctx, ep, req, key, out)
}

// callKeyed is call with the idempotency key given ("" for none).
func (c *Client) callKeyed(ctx context.Context, ep subjects.Endpoint, req any, key string, out any) error {
	resp, err := c.request(ctx, ep, req, key, c.opts.attempt)
	if err != nil {
		return err
	}
	if out != nil {
		if err := schema.DecodeJSON(resp.Data, out); err != nil {
			return fmt.Errorf("decode %s reply: %w", ep, err)
		}
	}
	return nil
}

// request is the client's one retry loop: it sends req until it gets an
// answer that is not a retryable error, or ctx ends, and returns a success
// reply as it came (JSON or not). A mutating request has an idempotency
// key (key, "" for none), the same on every attempt, so a retry after a
// lost reply applies once. attempt bounds each try; 0 lets a try last as
// long as ctx. Between tries it backs off, with jitter, from 20 ms up to
// 1 s.
//
// Every attempt carries a deadline (schema.HeaderDeadline): ctx's, or
// else the attempt's own end. No node starts a request after it, so when
// a write (ep.Writes) ends without an answer, its outcome is settled from
// that moment on (give or take the skew between the clocks). Whether it
// was applied before is what the error says: ErrUnavailable only when
// every attempt was answered "nothing changed" (a 503, or NATS's "no
// responders"); ErrOutcomeUnknown when any attempt may have been applied
// (no reply in time, a 504, a connection lost while it was out).
func (c *Client) request(ctx context.Context, ep subjects.Endpoint, req any, key string, attempt time.Duration) (*nats.Msg, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode %s request: %w", ep, err)
	}
	msg := nats.NewMsg(c.names.Request(ep))
	msg.Data = data
	if key != "" {
		msg.Header.Set(schema.HeaderIdempotencyKey, key)
	}
	// lastDeadline is the latest deadline any attempt carried: ctx's for
	// all of them, or else each attempt's own end.
	lastDeadline, perAttempt := ctx.Deadline()
	perAttempt = !perAttempt && attempt > 0
	if !lastDeadline.IsZero() {
		msg.Header.Set(schema.HeaderDeadline, schema.FormatDeadline(lastDeadline))
	}
	grace := time.Duration(0)
	if ep.Writes() {
		grace = noRespondersGrace
	}
	backoff := 20 * time.Millisecond
	var last error
	var unknown bool // an attempt of a write may have been applied
	for {
		if perAttempt {
			lastDeadline = time.Now().Add(attempt)
			msg.Header.Set(schema.HeaderDeadline, schema.FormatDeadline(lastDeadline))
		}
		sent := !c.nc.IsClosed() // a closed connection sends nothing
		resp, err := c.attempt(ctx, msg, attempt, grace)
		switch {
		case errors.Is(err, ErrPermissionDenied), errors.Is(err, nats.ErrMaxPayload):
			return nil, fmt.Errorf("%s: %w", ep, err) // no retry can succeed
		case err == nil && resp.Header.Get(schema.HeaderErrorCode) != "":
			var er schema.ErrorReply
			if err := json.Unmarshal(resp.Data, &er); err != nil || er.Error == nil {
				return nil, fmt.Errorf("%s: undecodable error reply %q", ep, resp.Data)
			}
			e := fromWire(er.Error)
			if !e.Retryable() {
				return nil, e
			}
			if errors.Is(e, ErrOutcomeUnknown) {
				unknown = true
			}
			if isStandbyAnswer(e) {
				c.noteStandby()
			}
			last = e
		case err == nil:
			c.standby.served()
			return resp, nil
		case errors.Is(err, nats.ErrConnectionClosed):
			// Closed during the attempt: whether it went out first is
			// not known.
			unknown = unknown || sent
			return nil, c.failed(ep, err, unknown, lastDeadline)
		default: // no responders (no leader yet), a timeout, a reconnect
			if !errors.Is(err, nats.ErrNoResponders) {
				unknown = true
			}
			if last == nil || ctx.Err() == nil {
				last = err // the end of ctx says less than the attempt before
			}
		}
		if ctx.Err() != nil {
			if last == nil {
				last = ctx.Err()
			}
			return nil, c.failed(ep, last, unknown, lastDeadline)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// failed is the error of a request that got no answer but retryable
// errors: ErrOutcomeUnknown for a write of which an attempt may have been
// applied (unknown), ErrUnavailable otherwise. last is the last attempt's
// error; deadline, unless zero, the latest any attempt carried.
func (c *Client) failed(ep subjects.Endpoint, last error, unknown bool, deadline time.Time) error {
	if !ep.Writes() || !unknown {
		if errors.Is(last, nats.ErrConnectionClosed) {
			return fmt.Errorf("%s: %w", ep, last)
		}
		return fmt.Errorf("%s: %w (last attempt: %v)", ep, ErrUnavailable, last)
	}
	after := "it has no deadline, so a node may still start it"
	if !deadline.IsZero() {
		after = "no node starts it after " + deadline.UTC().Format("15:04:05.000") + " UTC"
	}
	// last only in words: its sentinel (a 503's ErrUnavailable, "nothing
	// changed") would be a lie about the call, which an earlier attempt
	// may have applied.
	return fmt.Errorf("%s: %w: the request may or may not have been applied (%s); read before retrying (last attempt: %v)", ep, outcomeUnknown, after, last)
}

// attempt sends msg once and waits for the reply, for at most limit (0: as
// long as ctx allows), and grace longer when ctx ends first: a write cut
// short by the end of ctx may still learn, within a round trip, that NATS
// had no responder for it, the one answer that proves it changed nothing.
// A refusal by NATS of the publish or of the reply subscription ends the
// wait at once with ErrPermissionDenied.
func (c *Client) attempt(ctx context.Context, msg *nats.Msg, limit, grace time.Duration) (*nats.Msg, error) {
	if err := c.denied.repliesRefused(c.nc); err != nil {
		return nil, err
	}
	base, release := ctx, func() {}
	if grace > 0 {
		base, release = outlive(ctx, grace)
	}
	defer release()
	actx, cancel := base, context.CancelFunc(func() {})
	if limit > 0 {
		if d, ok := ctx.Deadline(); ok && time.Until(d) < limit {
			limit = time.Until(d) + grace
		}
		actx, cancel = context.WithTimeout(base, max(limit, time.Millisecond))
	}
	actx, cancelDenied := context.WithCancel(actx)
	stop := c.denied.add(&denialWaiter{publish: msg.Subject, replies: true, fire: cancelDenied})
	resp, err := c.nc.RequestMsgWithContext(actx, msg)
	denied := stop()
	cancelDenied()
	cancel()
	if err != nil && denied != nil {
		return nil, denied
	}
	return resp, err
}

// noRespondersGrace is how long a write's attempt outlives its call's
// context to hear NATS say that no one received it.
const noRespondersGrace = 100 * time.Millisecond

// outlive returns a context that ends grace after ctx ends, and a function
// that releases it.
func outlive(ctx context.Context, grace time.Duration) (context.Context, func()) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return c, func() { stop(); cancel() }
}

// Grant creates a lease.
func (c *Client) Grant(ctx context.Context, req schema.LeaseGrantRequest) (*schema.LeaseGrantReply, error) {
	var r schema.LeaseGrantReply
	return &r, c.call(ctx, subjects.LeaseGrant, req, true, &r)
}

// KeepAlive renews a lease.
//
// Keep-alives carry no idempotency key: renewing twice is harmless (a
// retry renews from a later moment, which is what the caller wants), and
// a key would make the server remember every renewal's reply, filling the
// idempotency cache, and every snapshot, with the busiest request there is.
func (c *Client) KeepAlive(ctx context.Context, req schema.LeaseKeepAliveRequest) (*schema.LeaseKeepAliveReply, error) {
	var r schema.LeaseKeepAliveReply
	return &r, c.call(ctx, subjects.LeaseKeepAlive, req, false, &r)
}

// KeepAliveMany renews many leases in one request; like KeepAlive, without
// an idempotency key.
func (c *Client) KeepAliveMany(ctx context.Context, req schema.LeaseKeepAliveManyRequest) (*schema.LeaseKeepAliveManyReply, error) {
	var r schema.LeaseKeepAliveManyReply
	return &r, c.call(ctx, subjects.LeaseKeepAliveMany, req, false, &r)
}

// Revoke deletes a lease and its keys.
func (c *Client) Revoke(ctx context.Context, req schema.LeaseRevokeRequest) (*schema.LeaseRevokeReply, error) {
	var r schema.LeaseRevokeReply
	return &r, c.call(ctx, subjects.LeaseRevoke, req, true, &r)
}

// LeaseInfo describes a lease.
func (c *Client) LeaseInfo(ctx context.Context, req schema.LeaseInfoRequest) (*schema.LeaseInfo, error) {
	var r schema.LeaseInfo
	return &r, c.call(ctx, subjects.LeaseInfo, req, false, &r)
}

// LeaseList lists leases.
func (c *Client) LeaseList(ctx context.Context, req schema.LeaseListRequest) (*schema.LeaseListReply, error) {
	var r schema.LeaseListReply
	return &r, c.call(ctx, subjects.LeaseList, req, false, &r)
}

// Put writes a key.
func (c *Client) Put(ctx context.Context, req schema.KVPutRequest) (*schema.KVPutReply, error) {
	var r schema.KVPutReply
	return &r, c.call(ctx, subjects.KVPut, req, true, &r)
}

// Get reads a key or a prefix.
func (c *Client) Get(ctx context.Context, req schema.KVGetRequest) (*schema.KVGetReply, error) {
	var r schema.KVGetReply
	return &r, c.call(ctx, subjects.KVGet, req, false, &r)
}

// Delete removes a key or a prefix.
func (c *Client) Delete(ctx context.Context, req schema.KVDeleteRequest) (*schema.KVDeleteReply, error) {
	var r schema.KVDeleteReply
	return &r, c.call(ctx, subjects.KVDelete, req, true, &r)
}

// Txn runs a transaction.
func (c *Client) Txn(ctx context.Context, req schema.KVTxnRequest) (*schema.KVTxnReply, error) {
	var r schema.KVTxnReply
	return &r, c.call(ctx, subjects.KVTxn, req, true, &r)
}

// Changes reads the change log.
func (c *Client) Changes(ctx context.Context, req schema.KVChangesRequest) (*schema.KVChangesReply, error) {
	var r schema.KVChangesReply
	return &r, c.call(ctx, subjects.KVChanges, req, false, &r)
}

// Status reports the cluster.
func (c *Client) Status(ctx context.Context, req schema.ClusterStatusRequest) (*schema.ClusterStatusReply, error) {
	var r schema.ClusterStatusReply
	return &r, c.call(ctx, subjects.ClusterStatus, req, false, &r)
}

// Ptr returns a pointer to v, for the optional fields of requests.
func Ptr[T any](v T) *T { return &v }

// Remove takes a node out of the cluster.
func (c *Client) Remove(ctx context.Context, req schema.ClusterRemoveRequest) (*schema.ClusterRemoveReply, error) {
	var r schema.ClusterRemoveReply
	return &r, c.call(ctx, subjects.ClusterRemove, req, false, &r)
}

// Snapshot makes the leader write a snapshot.
func (c *Client) Snapshot(ctx context.Context) (*schema.ClusterSnapshotReply, error) {
	var r schema.ClusterSnapshotReply
	return &r, c.call(ctx, subjects.ClusterSnapshot, schema.ClusterSnapshotRequest{}, false, &r)
}

// NodeInfo asks one node about itself, leader or not. It is not retried:
// a node that does not answer is the answer.
func (c *Client) NodeInfo(ctx context.Context, id string, withHash bool) (*schema.NodeInfo, error) {
	data, _ := json.Marshal(schema.NodeInfoRequest{Hash: withHash})
	req := nats.NewMsg(c.names.NodeInfo(id))
	req.Data = data
	msg, err := c.attempt(ctx, req, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", id, err)
	}
	if msg.Header.Get(schema.HeaderErrorCode) != "" {
		var er schema.ErrorReply
		if err := json.Unmarshal(msg.Data, &er); err == nil && er.Error != nil {
			return nil, fromWire(er.Error)
		}
		return nil, fmt.Errorf("node %s: undecodable error reply %q", id, msg.Data)
	}
	var info schema.NodeInfo
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		return nil, fmt.Errorf("node %s: %w", id, err)
	}
	return &info, nil
}
