package fsm

import (
	"bytes"
	"encoding/json"

	"github.com/google/btree"
)

// idemEntry remembers the reply to a request sent with an idempotency key,
// so that a retry gets the same reply instead of applying twice. Entries
// are immutable once in the trees.
type idemEntry struct {
	key      string
	hash     [32]byte // of the request's op and body
	revision int64    // the revision after the request applied
	seq      uint64   // insertion order, for eviction
	reply    json.RawMessage
}

func newIdemTrees() (*btree.BTreeG[*idemEntry], *btree.BTreeG[*idemEntry]) {
	return btree.NewG(btreeDegree, func(a, b *idemEntry) bool { return a.key < b.key }),
		btree.NewG(btreeDegree, func(a, b *idemEntry) bool { return a.seq < b.seq })
}

// applyIdempotent answers a retry from the cache, refuses a reused key
// with a different request, and otherwise applies c and remembers its
// reply. Failed requests are not remembered: they changed nothing, so a
// retry may apply.
func (s *State) applyIdempotent(c Command, now int64) Result {
	hash, err := bodyHash(c.Body)
	if err != nil {
		return Result{Op: c.Op, Err: err}
	}
	if e, ok := s.idemByKey.Get(&idemEntry{key: c.IdempotencyKey}); ok {
		if e.hash != hash {
			return Result{Op: c.Op, Err: errf(ErrIdempotencyConflict, "idempotency key %q was used for a different request", c.IdempotencyKey)}
		}
		return Result{Op: c.Op, Reply: e.reply, Cached: true}
	}
	r := s.applyBody(c.Op, c.Body, now)
	if r.Err != nil {
		return r
	}
	reply, err := marshalReply(r.Reply)
	if err != nil {
		return Result{Op: c.Op, Err: errf(ErrBadCommand, "encode reply for the idempotency cache: %v", err)}
	}
	s.idemSeq++
	e := &idemEntry{key: c.IdempotencyKey, hash: hash, revision: s.revision, seq: s.idemSeq, reply: reply}
	s.idemByKey.ReplaceOrInsert(e)
	s.idemBySeq.ReplaceOrInsert(e)
	return r
}

// pruneIdempotency evicts the oldest entries beyond the entry limit and
// every entry recorded more than the age limit in revisions ago.
func (s *State) pruneIdempotency() {
	for {
		e, ok := s.idemBySeq.Min()
		if !ok {
			return
		}
		tooMany := int64(s.idemBySeq.Len()) > s.limits.IdempotencyEntries
		tooOld := s.limits.IdempotencyRevisions > 0 && e.revision < s.revision-s.limits.IdempotencyRevisions
		if !tooMany && !tooOld {
			return
		}
		s.idemBySeq.Delete(e)
		s.idemByKey.Delete(e)
	}
}

// IdempotencyCount returns the number of remembered replies.
func (s *State) IdempotencyCount() int { return s.idemBySeq.Len() }

// marshalReply encodes a reply exactly as the service sends it: without
// HTML escaping, so a cached reply is byte for byte the first one.
func marshalReply(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
