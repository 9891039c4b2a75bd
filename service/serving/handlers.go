package serving

import (
	"context"
	"encoding/hex"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/subjects"
)

// handlers maps every request endpoint to its handler. A mutating request
// is decoded, then proposed (proposes); a read is decoded, then answered
// from the state once the read barrier allows (readbarrier.go): a look-up
// of one key or one lease under the state's read lock, anything that may
// walk many entries on a view taken after the barrier (stateMachine.view),
// so that Apply never waits for it.
func (s *Server) handlers() map[subjects.Endpoint]handler {
	return map[subjects.Endpoint]handler{
		subjects.LeaseGrant:         proposes(s, noBodyKey(s.cfg.Decoder.Grant)),
		subjects.LeaseKeepAlive:     proposes(s, noBodyKey(s.cfg.Decoder.KeepAlive)),
		subjects.LeaseKeepAliveMany: proposes(s, noBodyKey(s.cfg.Decoder.KeepAliveMany)),
		subjects.KVChanges:          s.handleChanges,
		subjects.LeaseRevoke:        proposes(s, noBodyKey(s.cfg.Decoder.Revoke)),
		subjects.LeaseInfo:          s.handleInfo,
		subjects.LeaseList:          s.handleList,
		subjects.KVPut:              proposes(s, s.cfg.Decoder.Put),
		subjects.KVGet:              s.handleGet,
		subjects.KVDelete:           proposes(s, s.cfg.Decoder.Delete),
		subjects.KVTxn:              proposes(s, s.cfg.Decoder.Txn),
		subjects.KVHistory:          s.handleHistory,
		subjects.KVCompact:          proposes(s, noBodyKey(s.cfg.Decoder.Compact)),

		subjects.ClusterJoin:     ownAccount(s.cfg.Cluster.Join),
		subjects.ClusterRemove:   ownAccount(s.cfg.Cluster.Remove),
		subjects.ClusterStatus:   ownAccount(s.cfg.Cluster.Status),
		subjects.ClusterSnapshot: ownAccount(s.cfg.Cluster.Snapshot),

		subjects.ClusterTenants: ownAccount(s.handleTenants),
		subjects.ClusterQuota:   proposes(s, noBodyKey(s.cfg.Decoder.Quota)),

		subjects.ClusterTenantMove:   proposes(s, noBodyKey(s.cfg.Decoder.TenantMove)),
		subjects.ClusterTenantExport: ownAccount(s.handleTenantExport),

		subjects.ClusterBackup:      ownAccount(s.handleBackup),
		subjects.ClusterBackupChunk: ownAccount(s.handleBackupChunk), // replies with raw bytes (backup.go)
	}
}

// proposes makes the handler of a mutating request: decode the body into
// a command (and the body's idempotency key, "" for none), then propose it
// under the request's key (decode.IdempotencyKey), no later than its
// deadline (decode.Deadline), and reply with what applying it produced. A request
// that does not decode is refused before the log.
func proposes[C any](s *Server, decodeBody func([]byte) (C, string, *schema.Error)) handler {
	return func(_ context.Context, m *nats.Msg, tenant string) (any, *schema.Error) {
		cmd, bodyKey, e := decodeBody(m.Data)
		if e != nil {
			return nil, e
		}
		key, e := decode.IdempotencyKey(m, bodyKey)
		if e != nil {
			return nil, e
		}
		deadline, e := decode.Deadline(m, time.Now())
		if e != nil {
			return nil, e
		}
		res, e := s.proposeUntil(tenant, cmd, key, deadline)
		if e != nil {
			return nil, e
		}
		return res.Reply, nil
	}
}

// noBodyKey adapts the decoder of a request whose body has no
// idempotency_key field: only the header may give its key.
func noBodyKey[C any](decodeBody func([]byte) (C, *schema.Error)) func([]byte) (C, string, *schema.Error) {
	return func(data []byte) (C, string, *schema.Error) {
		cmd, e := decodeBody(data)
		return cmd, "", e
	}
}

func (s *Server) handleChanges(ctx context.Context, m *nats.Msg, tenant string) (any, *schema.Error) {
	q, e := s.cfg.Decoder.Changes(m.Data)
	if e != nil {
		return nil, e
	}
	if _, e := s.reads.now(ctx, false); e != nil {
		return nil, e
	}
	q.MaxBytes = s.cfg.Decoder.ReplyBytes()
	reply, err := s.sm.View(tenant).Changes(q)
	if err != nil {
		return nil, errorFor(err)
	}
	return reply, nil
}

func (s *Server) handleInfo(ctx context.Context, m *nats.Msg, tenant string) (any, *schema.Error) {
	req, e := s.cfg.Decoder.LeaseInfo(m.Data)
	if e != nil {
		return nil, e
	}
	now, e := s.reads.now(ctx, false)
	if e != nil {
		return nil, e
	}
	var info *schema.LeaseInfo
	var err error
	if req.Keys {
		// Its keys may be many.
		v := s.sm.View(tenant)
		info, err = v.LeaseInfo(req.ID, true, max(now, v.Now()))
	} else {
		s.sm.Read(func(st *fsm.State) { info, err = st.In(tenant).LeaseInfo(req.ID, false, max(now, st.Now())) })
	}
	if err != nil {
		return nil, errorFor(err)
	}
	return info, nil
}

func (s *Server) handleList(ctx context.Context, m *nats.Msg, tenant string) (any, *schema.Error) {
	req, e := s.cfg.Decoder.LeaseList(m.Data)
	if e != nil {
		return nil, e
	}
	now, e := s.reads.now(ctx, false)
	if e != nil {
		return nil, e
	}
	v := s.sm.View(tenant)
	return v.LeaseList(req.IncludeAnonymous, req.After, req.Limit, max(now, v.Now())), nil
}

func (s *Server) handleGet(ctx context.Context, m *nats.Msg, tenant string) (any, *schema.Error) {
	req, e := s.cfg.Decoder.Get(m.Data)
	if e != nil {
		return nil, e
	}
	now, e := s.reads.now(ctx, req.Serializable)
	if e != nil {
		return nil, e
	}
	req.Query.MaxBytes = s.cfg.Decoder.ReplyBytes()
	var reply *schema.KVGetReply
	var err error
	if !req.Query.IsPrefix && !req.Query.IsRange {
		// One key, at the present or a past revision: a look-up.
		s.sm.Read(func(st *fsm.State) { reply, err = st.In(tenant).GetAt(req.Query, req.Revision, max(now, st.Now())) })
	} else {
		buf := kvsPool.Get().(*[]schema.KeyValue)
		req.Query.Into = *buf
		pace := newListingPacer(s.cfg.ListingShare, s.proposer.writing, s.cfg.ListingPaused)
		req.Query.Yield = pace.yield
		v := s.sm.View(tenant)
		reply, err = v.GetAt(req.Query, req.Revision, max(now, v.Now()))
		if err != nil {
			kvsPool.Put(buf)
			return nil, errorFor(err)
		}
		return &pooledGetReply{KVGetReply: reply, buf: buf, pace: pace}, nil
	}
	if err != nil {
		return nil, errorFor(err)
	}
	return reply, nil
}

// kvsPool holds the record slices of listing replies: a reader paging
// through a large prefix would otherwise grow a slice of thousands of
// records per page, and the garbage makes the collector run beside the
// writes.
var kvsPool = sync.Pool{New: func() any { return new([]schema.KeyValue) }}

// maxPooledKVs bounds the slices kept, as maxPooledReply the buffers.
const maxPooledKVs = 16_384

// pooledGetReply is a listing reply whose record slice goes back to
// kvsPool once the reply is sent (releaser).
type pooledGetReply struct {
	*schema.KVGetReply
	buf  *[]schema.KeyValue
	pace *listingPacer
}

// AppendJSON writes the reply, yielding the processor every few hundred
// records (and pausing while writes are in flight): a page of thousands
// takes milliseconds to write, and the goroutines the writes wait on
// should not wait a whole time slice.
func (r *pooledGetReply) AppendJSON(b []byte) []byte {
	r.pace.restart()
	return r.KVGetReply.AppendJSONYielding(b, r.pace.yield)
}

// release drops the records' references, so a pooled slice keeps no
// values alive, and pools the slice.
func (r *pooledGetReply) release() {
	kvs := r.KVs
	clear(kvs)
	if cap(kvs) <= maxPooledKVs {
		*r.buf = kvs[:0]
		kvsPool.Put(r.buf)
	}
}

func (s *Server) handleHistory(ctx context.Context, m *nats.Msg, tenant string) (any, *schema.Error) {
	req, e := s.cfg.Decoder.History(m.Data)
	if e != nil {
		return nil, e
	}
	if _, e := s.reads.now(ctx, req.Serializable); e != nil {
		return nil, e
	}
	req.Query.MaxBytes = s.cfg.Decoder.ReplyBytes()
	reply, err := s.sm.View(tenant).History(req.Query)
	if err != nil {
		return nil, errorFor(err)
	}
	return reply, nil
}

// handleTenants answers the operator's view of every tenant, after the
// read barrier, under the read lock: a few numbers per tenant.
func (s *Server) handleTenants(ctx context.Context, m *nats.Msg) (any, *schema.Error) {
	req, e := s.cfg.Decoder.Tenants(m.Data)
	if e != nil {
		return nil, e
	}
	if _, e := s.reads.now(ctx, false); e != nil {
		return nil, e
	}
	var reply *schema.ClusterTenantsReply
	s.sm.Read(func(st *fsm.State) { reply = st.TenantReport(req.Tenant) })
	return reply, nil
}

// handleTenantExport answers a page of a fenced tenant's space. The space
// no longer changes, so its leases and keys are read from a view, without
// the lock; the idempotency entries, which views leave out, under it (a
// page of them is a short walk).
func (s *Server) handleTenantExport(ctx context.Context, m *nats.Msg) (any, *schema.Error) {
	req, e := s.cfg.Decoder.TenantExport(m.Data)
	if e != nil {
		return nil, e
	}
	if _, e := s.reads.now(ctx, false); e != nil {
		return nil, e
	}
	var page *fsm.ExportPage
	var err error
	if req.Section == schema.ExportIdempotency {
		s.sm.Read(func(st *fsm.State) {
			page, err = st.ExportTenant(req.Tenant, req.Section, req.After, req.Limit, s.cfg.Decoder.ReplyBytes()/2)
		})
	} else {
		page, err = s.sm.View(req.Tenant).ExportTenant(req.Section, req.After, req.Limit, s.cfg.Decoder.ReplyBytes()/2)
	}
	if err != nil {
		return nil, errorFor(err)
	}
	return exportReply(req.Tenant, page), nil
}

// exportReply is a page as the wire carries it.
func exportReply(tenant string, p *fsm.ExportPage) *schema.ClusterTenantExportReply {
	r := &schema.ClusterTenantExportReply{Tenant: tenant, To: p.To, FencedAt: p.FencedAt, NextLeaseID: p.NextLeaseID, More: p.More}
	if p.More {
		r.Next = p.Next
	}
	for _, l := range p.Leases {
		r.Leases = append(r.Leases, schema.MovedLease{ID: l.ID, TTL: l.TTL, RemainingMS: l.RemainingMS, Anonymous: l.Anonymous, Metadata: l.Metadata})
	}
	for _, k := range p.Keys {
		r.Keys = append(r.Keys, schema.MovedKey{Key: k.Key, Value: k.Value, Version: k.Version, Lease: k.Lease, ContentType: k.ContentType, Metadata: k.Metadata})
	}
	for _, e := range p.Idempotency {
		r.Idempotency = append(r.Idempotency, schema.MovedIdem{Key: e.Key, Hash: hex.EncodeToString(e.Hash[:]), Reply: e.Reply})
	}
	return r
}
