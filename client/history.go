package client

import (
	"context"
	"fmt"
	"iter"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// A key's history (P.kv.history) and compaction (P.kv.compact). Reads at a
// past revision are GetKey and GetPrefix with AtRevision.

// HistoryOption sets an optional field of the request History and
// HistoryAll send.
type HistoryOption func(*schema.KVHistoryRequest)

// FromRevision starts the window at revision rev, included; without it the
// window starts at the oldest change the history retains. A window that
// starts at or below the compaction floor gives ErrCompacted.
func FromRevision(rev int64) HistoryOption {
	return func(r *schema.KVHistoryRequest) { r.FromRevision = rev }
}

// ToRevision ends the window at revision rev, included; without it the
// window ends at the present. A revision above the current one gives
// ErrInvalidRequest.
func ToRevision(rev int64) HistoryOption {
	return func(r *schema.KVHistoryRequest) { r.ToRevision = rev }
}

// HistoryLimit bounds the records of one reply (1 to 1000; the server's
// default is 100). HistoryAll asks for pages of this size.
func HistoryLimit(n int) HistoryOption {
	return func(r *schema.KVHistoryRequest) { r.Limit = n }
}

// NewestFirst lists the newest change first.
func NewestFirst() HistoryOption {
	return func(r *schema.KVHistoryRequest) { r.NewestFirst = true }
}

// AfterRevision continues a listing: the records after revision rev (before
// it, with NewestFirst). Give it the NextRevision of the reply before.
func AfterRevision(rev int64) HistoryOption {
	return func(r *schema.KVHistoryRequest) { r.AfterRevision = rev }
}

// History returns one page of key's changes in a window (by default, every
// change the history retains, oldest first, 100 at most): each a put with
// the value it wrote, or a delete (version 0) whose Cause says why: delete,
// txn (a delete in a transaction), lease_expired or lease_revoked. When More is set, ask again with
// AfterRevision(reply.NextRevision), or use HistoryAll, which does.
func (c *Client) History(ctx context.Context, key string, opts ...HistoryOption) (*schema.KVHistoryReply, error) {
	req := schema.KVHistoryRequest{Key: key}
	for _, o := range opts {
		o(&req)
	}
	return c.history(ctx, req)
}

func (c *Client) history(ctx context.Context, req schema.KVHistoryRequest) (*schema.KVHistoryReply, error) {
	var r schema.KVHistoryReply
	return &r, c.call(ctx, subjects.KVHistory, req, false, &r)
}

// HistoryAll yields every change of key in the window the options give,
// following the pages; HistoryLimit sets their size. It stops at the first
// error, which it yields with a zero event: a refused request, or
// ErrCompacted when a compaction removed records of the window while it
// was being read (a listing that went on would skip them silently).
func (c *Client) HistoryAll(ctx context.Context, key string, opts ...HistoryOption) iter.Seq2[schema.Event, error] {
	req := schema.KVHistoryRequest{Key: key}
	for _, o := range opts {
		o(&req)
	}
	return func(yield func(schema.Event, error) bool) {
		var floor0, lo0 int64 // the first page's floor; the window's oldest revision then
		for page := 0; ; page++ {
			r, err := c.history(ctx, req)
			if err != nil {
				yield(schema.Event{}, err)
				return
			}
			if page == 0 {
				floor0, lo0 = r.CompactRevision, max(req.FromRevision, r.CompactRevision+1)
			}
			if lost := historyLost(req, r.CompactRevision, floor0, lo0); lost {
				yield(schema.Event{}, compactedWhileReading(key, r.CompactRevision))
				return
			}
			for _, e := range r.Records {
				if !yield(e, nil) {
					return
				}
			}
			if !r.More {
				return
			}
			req.AfterRevision = r.NextRevision
		}
	}
}

// historyLost reports whether a page's floor passed records of the window
// the listing has not yet returned. Oldest first, those lie after
// req.AfterRevision; newest first, from the window's first revision up to
// it. The server answers a page from the floor on, so they would be
// skipped without a word.
func historyLost(req schema.KVHistoryRequest, floor, floor0, lo0 int64) bool {
	if req.NewestFirst {
		return floor > floor0 && floor >= lo0
	}
	return req.AfterRevision != 0 && floor > req.AfterRevision
}

// compactedWhileReading is the error of a listing a compaction cut short.
func compactedWhileReading(key string, floor int64) error {
	spec, _ := schema.LookupError(schema.ErrCompacted)
	return &Error{Code: spec.Code, Name: spec.Name,
		Description: fmt.Sprintf("revisions up to %d were compacted while the history of %s was read; read it again", floor, key)}
}

// Compact drops the history at and below revision rev, on every replica at
// the same point of the log: reads at revisions below rev, history windows
// starting at or below it and change-log positions below it then give
// ErrCompacted. Compacting to or below the floor changes nothing (the
// reply says the floor as it is); a revision above the current one gives
// ErrInvalidRequest. With deploy/nats/roles.conf only the operators' role
// (concord-replica) may send it; others get ErrPermissionDenied.
func (c *Client) Compact(ctx context.Context, rev int64) (*schema.KVCompactReply, error) {
	var r schema.KVCompactReply
	return &r, c.call(ctx, subjects.KVCompact, schema.KVCompactRequest{Revision: rev}, true, &r)
}
