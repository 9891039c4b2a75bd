package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/concord-io/concord/schema"
)

// ErrLocked is returned by TryLock when another session holds the lock.
var ErrLocked = errors.New("concord: locked by another session")

// ErrSessionExpired is returned when the session's lease was lost while
// waiting. Session.Err of a session that lost its lease matches it too,
// along with the cause.
var ErrSessionExpired = errors.New("concord: session expired")

// Mutex is a distributed lock held by a session. Waiters queue: each
// writes its own key under the lock's name, on its lease, and the order of
// the keys' create revisions is the order of the queue. A waiter watches
// only the key just ahead of it, so a release wakes one waiter, not all.
//
// FencingToken is the create revision of the holder's key. It grows with
// every new holder, so a protected resource that remembers the largest
// token it has seen and refuses smaller ones is safe even from a holder
// that paused past its lease.
type Mutex struct {
	s    *Session
	pfx  string
	key  string
	rev  int64
	held bool
}

// NewMutex returns the lock called name (a key prefix such as
// "locks.build") for the session.
func NewMutex(s *Session, name string) *Mutex {
	pfx := name + "."
	return &Mutex{s: s, pfx: pfx, key: pfx + strconv.FormatInt(s.Lease(), 10)}
}

// Lock waits until the session holds the lock, ctx ends, or the session
// expires. On failure it leaves the queue.
func (m *Mutex) Lock(ctx context.Context) error {
	if err := m.enqueue(ctx); err != nil {
		return err
	}
	if err := waitTurn(ctx, m.s, m.pfx, m.rev); err != nil {
		m.leave()
		return err
	}
	m.held = true
	return nil
}

// TryLock takes the lock if it is free now, and returns ErrLocked if not.
func (m *Mutex) TryLock(ctx context.Context) error {
	if err := m.enqueue(ctx); err != nil {
		return err
	}
	ahead, _, err := predecessor(ctx, m.s.c, m.pfx, m.rev)
	if err != nil {
		m.leave()
		return err
	}
	if ahead != nil {
		m.leave()
		return ErrLocked
	}
	m.held = true
	return nil
}

// Unlock releases the lock.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.held = false
	_, err := m.s.c.Delete(ctx, schema.KVDeleteRequest{Key: &m.key})
	return err
}

// FencingToken returns the create revision of the holder's key: the value
// that protected resources must compare (see Mutex).
func (m *Mutex) FencingToken() int64 { return m.rev }

// Key returns this session's key under the lock.
func (m *Mutex) Key() string { return m.key }

// enqueue creates this session's key if it does not exist (a session that
// already waits or holds keeps its place) and learns its create revision.
func (m *Mutex) enqueue(ctx context.Context) error {
	rev, _, err := claim(ctx, m.s, m.key, json.RawMessage(`""`))
	m.rev = rev
	return err
}

func (m *Mutex) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), m.s.ttl)
	defer cancel()
	_, _ = m.s.c.Delete(ctx, schema.KVDeleteRequest{Key: &m.key})
}

// claim creates key on the session's lease unless it exists, and returns
// its create revision and whether this call created it.
func claim(ctx context.Context, s *Session, key string, value json.RawMessage) (int64, bool, error) {
	r, err := s.c.Txn(ctx, schema.KVTxnRequest{
		Compare: []schema.TxnCompare{{Key: key, Target: schema.TargetCreateRevision, Op: "==", Value: json.RawMessage("0")}},
		Success: []schema.TxnOp{{Put: &schema.TxnPut{Key: key, Value: value, Lease: Ptr(s.Lease())}}},
		Failure: []schema.TxnOp{{Get: &schema.TxnGet{Key: &key}}},
	})
	if err != nil {
		return 0, false, err
	}
	if r.Succeeded {
		return r.Revision, true, nil
	}
	kvs := r.Responses[0].Get.KVs
	if len(kvs) != 1 {
		return 0, false, fmt.Errorf("concord: key %s vanished while claiming it", key)
	}
	if kvs[0].Lease != s.Lease() {
		return 0, false, fmt.Errorf("concord: key %s belongs to lease %d, not this session's %d", key, kvs[0].Lease, s.Lease())
	}
	return kvs[0].CreateRevision, false, nil
}

// predecessor returns the key just ahead of rev under pfx (nil when rev is
// first) and the revision of the read.
func predecessor(ctx context.Context, c *Client, pfx string, rev int64) (*schema.KeyValue, int64, error) {
	var best *schema.KeyValue
	after := ""
	for {
		g, err := c.Get(ctx, schema.KVGetRequest{Prefix: &pfx, After: after, KeysOnly: true, Limit: schema.MaxListLimit})
		if err != nil {
			return nil, 0, err
		}
		for i := range g.KVs {
			kv := &g.KVs[i]
			if kv.CreateRevision < rev && (best == nil || kv.CreateRevision > best.CreateRevision) {
				best = kv
			}
		}
		if !g.More {
			return best, g.Revision, nil
		}
		after = g.KVs[len(g.KVs)-1].Key
	}
}

// waitTurn waits until no key under pfx was created before rev.
func waitTurn(ctx context.Context, s *Session, pfx string, rev int64) error {
	for {
		ahead, readAt, err := predecessor(ctx, s.c, pfx, rev)
		if err != nil {
			return err
		}
		if ahead == nil {
			return nil
		}
		if err := waitDeleted(ctx, s, ahead.Key, readAt); err != nil {
			return err
		}
	}
}

// waitDeleted waits for key to be deleted after revision from.
func waitDeleted(ctx context.Context, s *Session, key string, from int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.c.Watch(wctx, key, false, from)
	if err != nil {
		return err
	}
	for {
		select {
		case <-s.Done():
			return sessionLost(s)
		case e, ok := <-w.Events():
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return w.Err()
			}
			if e.Type == schema.EventDelete {
				return nil
			}
		}
	}
}

// sessionLost is the error of a wait that the end of s cut short: it
// matches ErrSessionExpired, and says why the session ended.
func sessionLost(s *Session) error {
	err := s.Err()
	if errors.Is(err, ErrSessionExpired) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrSessionExpired, err)
}
