package client

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/concord-io/concord/schema"
)

// ErrNotElected is returned by Proclaim and Resign when the session is no
// longer a candidate (its key is gone or was made by another session).
var ErrNotElected = errors.New("concord: not the elected leader")

// ErrNoLeader is returned by Leader when nobody leads.
var ErrNoLeader = errors.New("concord: no leader")

// Election elects one leader among sessions. Candidates queue like Mutex
// waiters; the one whose key was created first leads and publishes a value
// (its address, say) that observers read.
type Election struct {
	s   *Session
	pfx string
	key string
	rev int64
}

// NewElection returns the election called name (a key prefix) for the
// session.
func NewElection(s *Session, name string) *Election {
	pfx := name + "."
	return &Election{s: s, pfx: pfx, key: pfx + strconv.FormatInt(s.Lease(), 10)}
}

// Campaign puts the session in the running with value and waits until it
// leads, ctx ends or the session expires.
func (e *Election) Campaign(ctx context.Context, value json.RawMessage) error {
	rev, created, err := claim(ctx, e.s, e.key, value)
	if err != nil {
		return err
	}
	e.rev = rev
	if !created { // a candidate campaigning again updates its value
		if err := e.Proclaim(ctx, value); err != nil {
			return err
		}
	}
	if err := waitTurn(ctx, e.s, e.pfx, rev); err != nil {
		e.resign()
		return err
	}
	return nil
}

// Proclaim changes the leader's value without a new election.
func (e *Election) Proclaim(ctx context.Context, value json.RawMessage) error {
	r, err := e.s.c.Txn(ctx, schema.KVTxnRequest{
		Compare: []schema.TxnCompare{{Key: e.key, Target: schema.TargetCreateRevision, Op: "==", Value: json.RawMessage(strconv.FormatInt(e.rev, 10))}},
		Success: []schema.TxnOp{{Put: &schema.TxnPut{Key: e.key, Value: value, Lease: Ptr(e.s.Lease())}}},
	})
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return ErrNotElected
	}
	return nil
}

// Resign gives up leading (or campaigning).
func (e *Election) Resign(ctx context.Context) error {
	r, err := e.s.c.Txn(ctx, schema.KVTxnRequest{
		Compare: []schema.TxnCompare{{Key: e.key, Target: schema.TargetCreateRevision, Op: "==", Value: json.RawMessage(strconv.FormatInt(e.rev, 10))}},
		Success: []schema.TxnOp{{Delete: &schema.TxnDelete{Key: &e.key}}},
	})
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return ErrNotElected
	}
	return nil
}

func (e *Election) resign() {
	ctx, cancel := context.WithTimeout(context.Background(), e.s.ttl)
	defer cancel()
	_ = e.Resign(ctx)
}

// Leader returns the current leader's key and value.
func (c *Client) Leader(ctx context.Context, name string) (*schema.KeyValue, error) {
	kv, _, err := leaderOf(ctx, c, name+".")
	if err != nil {
		return nil, err
	}
	if kv == nil {
		return nil, ErrNoLeader
	}
	return kv, nil
}

// leaderOf returns the first candidate under pfx and the read's revision.
func leaderOf(ctx context.Context, c *Client, pfx string) (*schema.KeyValue, int64, error) {
	var best *schema.KeyValue
	after := ""
	for {
		g, err := c.Get(ctx, schema.KVGetRequest{Prefix: &pfx, After: after, Limit: schema.MaxListLimit})
		if err != nil {
			return nil, 0, err
		}
		for i := range g.KVs {
			if best == nil || g.KVs[i].CreateRevision < best.CreateRevision {
				kv := g.KVs[i]
				best = &kv
			}
		}
		if !g.More {
			return best, g.Revision, nil
		}
		after = g.KVs[len(g.KVs)-1].Key
	}
}

// Observe sends the election's leader each time it or its value changes
// (nil while nobody leads), until ctx ends. It retries failed reads and
// watches, except a refusal by NATS: then it closes the channel early and
// c.PermissionError() returns the refusal.
func (c *Client) Observe(ctx context.Context, name string) <-chan *schema.KeyValue {
	out := make(chan *schema.KeyValue)
	go func() {
		defer close(out)
		pfx := name + "."
		var last *schema.KeyValue
		first := true
		backoff := 100 * time.Millisecond
		pause := func() {
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
		for ctx.Err() == nil {
			kv, rev, err := leaderOf(ctx, c, pfx)
			if errors.Is(err, ErrPermissionDenied) {
				return // no retry can succeed; PermissionError says why
			}
			if err != nil {
				pause()
				continue
			}
			if first || !sameLeader(last, kv) {
				select {
				case out <- kv:
				case <-ctx.Done():
					return
				}
				last, first = kv, false
			}
			// Wait for any change under the prefix, then read the leader
			// again. Each round's watcher ends with the round.
			wctx, cancel := context.WithCancel(ctx)
			w, err := c.Watch(wctx, pfx, true, rev)
			if err != nil {
				cancel()
				pause()
				continue
			}
			select {
			case _, ok := <-w.Events():
				if !ok && errors.Is(w.Err(), ErrPermissionDenied) {
					cancel()
					return
				}
				if !ok && w.Err() != nil && ctx.Err() == nil {
					pause()
				} else {
					backoff = 100 * time.Millisecond
				}
			case <-ctx.Done():
			}
			cancel()
		}
	}()
	return out
}

func sameLeader(a, b *schema.KeyValue) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Key == b.Key && a.ModRevision == b.ModRevision
}
