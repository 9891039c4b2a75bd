package fsm

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/google/btree"

	"github.com/concord-io/concord/schema"
)

// SnapshotFormat names the snapshot encoding; SnapshotVersion is bumped on
// any incompatible change, and Restore keeps reading every older version
// (fsm/testdata holds a golden file per version).
const (
	SnapshotFormat  = "concord.fsm"
	SnapshotVersion = 4
)

// Snapshot is a point-in-time copy of the state. Taking it is O(1): the
// trees are cloned copy-on-write, so Apply can go on while it is written.
type Snapshot struct {
	kv          *btree.BTreeG[*record]
	leases      *btree.BTreeG[*lease]
	idem        *btree.BTreeG[*idemEntry] // by insertion order
	idemSeq     uint64
	hist        history
	revision    int64
	nextLeaseID int64
	now         int64
	limits      Limits
}

type snapshotHeader struct {
	Format      string `json:"format"`
	Version     int    `json:"version"`
	Revision    int64  `json:"revision"`
	NextLeaseID int64  `json:"next_lease_id"`
	Now         int64  `json:"now"`
	Limits      Limits `json:"limits"`
	Leases      int    `json:"leases"`
	Keys        int    `json:"keys"`
	// Since version 2: the idempotency cache.
	Idempotency    int    `json:"idempotency,omitempty"`
	IdempotencySeq uint64 `json:"idempotency_seq,omitempty"`
	// Version 3 only: the change log. Since version 3: the floor.
	Changes         int   `json:"changes,omitempty"`
	CompactRevision int64 `json:"compact_revision,omitempty"`
	// Since version 4: the history, which replaced the change log.
	History int `json:"history,omitempty"`
}

// snapshotVersion is one version of the history. A put that is still the
// key's live record says so (Live) instead of repeating it.
type snapshotVersion struct {
	Key      string `json:"key"`
	Revision int64  `json:"revision"`
	OpIndex  int32  `json:"op_index"`
	Cause    string `json:"cause"`
	Now      int64  `json:"now"`
	// Lease is the lease a deleted key was attached to.
	Lease int64 `json:"lease,omitempty"`
	Live  bool  `json:"live,omitempty"`
	// The record a put wrote, unless Live.
	Record *snapshotKV `json:"record,omitempty"`
}

type snapshotChange struct {
	Now   int64        `json:"now"`
	Event schema.Event `json:"event"`
}

type snapshotIdem struct {
	Key      string          `json:"key"`
	Hash     string          `json:"hash"`
	Revision int64           `json:"revision"`
	Seq      uint64          `json:"seq"`
	Reply    json.RawMessage `json:"reply"`
}

type snapshotLease struct {
	ID              int64           `json:"id"`
	TTL             int64           `json:"ttl"`
	Deadline        int64           `json:"deadline"`
	GrantedRevision int64           `json:"granted_revision"`
	Anonymous       bool            `json:"anonymous,omitempty"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
}

type snapshotKV struct {
	Key            string          `json:"key"`
	Value          json.RawMessage `json:"value"`
	CreateRevision int64           `json:"create_revision"`
	ModRevision    int64           `json:"mod_revision"`
	Version        int64           `json:"version"`
	Lease          int64           `json:"lease,omitempty"`
	// Since version 4, when the put carried them.
	ContentType string          `json:"content_type,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

func snapshotKVOf(r *record) snapshotKV {
	return snapshotKV{r.key, r.value, r.createRevision, r.modRevision, r.version, r.lease, r.contentType(), r.metadata()}
}

func (sk *snapshotKV) record() *record {
	return &record{key: sk.Key, value: sk.Value, createRevision: sk.CreateRevision, modRevision: sk.ModRevision, version: sk.Version, lease: sk.Lease,
		extra: newExtra(sk.ContentType, sk.Metadata)}
}

// Snapshot captures the state. Attachments and the deadline index are not
// captured: they are derived from the keys and leases on restore.
func (s *State) Snapshot() *Snapshot {
	return &Snapshot{
		kv:          s.kv.Clone(),
		leases:      s.leases.Clone(),
		idem:        s.idemBySeq.Clone(),
		idemSeq:     s.idemSeq,
		hist:        s.hist.clone(),
		revision:    s.revision,
		nextLeaseID: s.nextLeaseID,
		now:         s.now,
		limits:      s.limits,
	}
}

// WriteTo writes the snapshot as a header line followed by one JSON line per
// lease (by id) and per key (by key). The output is a function of the state
// alone, so equal states give equal bytes.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: bufio.NewWriterSize(w, 1<<16)}
	enc := json.NewEncoder(cw)
	enc.SetEscapeHTML(false)
	err := enc.Encode(snapshotHeader{
		Format: SnapshotFormat, Version: SnapshotVersion,
		Revision: sn.revision, NextLeaseID: sn.nextLeaseID, Now: sn.now, Limits: sn.limits,
		Leases: sn.leases.Len(), Keys: sn.kv.Len(),
		Idempotency: sn.idem.Len(), IdempotencySeq: sn.idemSeq,
		History: sn.hist.byKey.Len(), CompactRevision: sn.hist.floor,
	})
	sn.leases.Ascend(func(l *lease) bool {
		err = enc.Encode(snapshotLease{l.id, l.ttl, l.deadline, l.grantedRevision, l.anonymous, l.metadata})
		return err == nil
	})
	if err == nil {
		sn.kv.Ascend(func(r *record) bool {
			err = enc.Encode(snapshotKVOf(r))
			return err == nil
		})
	}
	if err == nil {
		sn.idem.Ascend(func(e *idemEntry) bool {
			err = enc.Encode(snapshotIdem{e.key, hex.EncodeToString(e.hash[:]), e.revision, e.seq, e.reply})
			return err == nil
		})
	}
	if err == nil {
		sn.hist.byKey.Ascend(func(v *version) bool {
			sv := snapshotVersion{Key: v.key(), Revision: v.rev, OpIndex: v.op, Cause: causeNames[v.cause], Now: v.now}
			if v.isDelete() {
				sv.Lease = v.rec.lease
			} else if r := v.rec; r != nil {
				if live, ok := sn.kv.Get(r); ok && live == r {
					sv.Live = true
				} else {
					kv := snapshotKVOf(r)
					sv.Record = &kv
				}
			}
			err = enc.Encode(sv)
			return err == nil
		})
	}
	if err == nil {
		err = cw.w.(*bufio.Writer).Flush()
	}
	if err != nil {
		return cw.n, fmt.Errorf("write snapshot: %w", err)
	}
	return cw.n, nil
}

// Restore replaces the state with a snapshot. On error the state is unchanged.
func (s *State) Restore(r io.Reader) error {
	ns, err := readSnapshot(r)
	if err != nil {
		return err
	}
	*s = *ns
	return nil
}

func readSnapshot(r io.Reader) (*State, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 1<<16))
	dec.DisallowUnknownFields()
	var h snapshotHeader
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrBadSnapshot, err)
	}
	if h.Format != SnapshotFormat || h.Version < 1 || h.Version > SnapshotVersion {
		return nil, fmt.Errorf("%w: format %q version %d, this build reads %q up to version %d", ErrBadSnapshot, h.Format, h.Version, SnapshotFormat, SnapshotVersion)
	}
	s := New()
	s.revision, s.nextLeaseID, s.now, s.limits = h.Revision, h.NextLeaseID, h.Now, h.Limits.withDefaults()
	s.idemSeq = h.IdempotencySeq
	for i := 0; i < h.Leases; i++ {
		var sl snapshotLease
		if err := dec.Decode(&sl); err != nil {
			return nil, fmt.Errorf("%w: lease %d of %d: %v", ErrBadSnapshot, i+1, h.Leases, err)
		}
		if sl.ID < 1 || sl.TTL < 1 || s.getLease(sl.ID) != nil {
			return nil, fmt.Errorf("%w: lease %d of %d: bad or duplicate id %d or ttl %d", ErrBadSnapshot, i+1, h.Leases, sl.ID, sl.TTL)
		}
		s.setLease(&lease{id: sl.ID, ttl: sl.TTL, deadline: sl.Deadline, grantedRevision: sl.GrantedRevision, anonymous: sl.Anonymous, metadata: sl.Metadata})
	}
	for i := 0; i < h.Keys; i++ {
		var sk snapshotKV
		if err := dec.Decode(&sk); err != nil {
			return nil, fmt.Errorf("%w: key %d of %d: %v", ErrBadSnapshot, i+1, h.Keys, err)
		}
		if sk.Key == "" || len(sk.Value) == 0 || s.getRecord(sk.Key) != nil {
			return nil, fmt.Errorf("%w: key %d of %d: empty, valueless or duplicate key %q", ErrBadSnapshot, i+1, h.Keys, sk.Key)
		}
		rec := sk.record()
		if rec.lease != 0 {
			l := s.getLease(rec.lease)
			if l == nil {
				return nil, fmt.Errorf("%w: key %q names missing lease %d", ErrBadSnapshot, rec.key, rec.lease)
			}
			s.attach(l, rec.key)
		}
		s.kv.ReplaceOrInsert(rec)
	}
	for i := 0; i < h.Idempotency; i++ {
		var si snapshotIdem
		if err := dec.Decode(&si); err != nil {
			return nil, fmt.Errorf("%w: idempotency entry %d of %d: %v", ErrBadSnapshot, i+1, h.Idempotency, err)
		}
		e := &idemEntry{key: si.Key, revision: si.Revision, seq: si.Seq, reply: si.Reply}
		hash, err := hex.DecodeString(si.Hash)
		if err != nil || len(hash) != len(e.hash) || e.key == "" || len(e.reply) == 0 || e.seq == 0 || e.seq > s.idemSeq {
			return nil, fmt.Errorf("%w: idempotency entry %d of %d is malformed", ErrBadSnapshot, i+1, h.Idempotency)
		}
		copy(e.hash[:], hash)
		if _, dup := s.idemByKey.ReplaceOrInsert(e); dup {
			return nil, fmt.Errorf("%w: idempotency key %q appears twice", ErrBadSnapshot, e.key)
		}
		if _, dup := s.idemBySeq.ReplaceOrInsert(e); dup {
			return nil, fmt.Errorf("%w: idempotency sequence %d appears twice", ErrBadSnapshot, e.seq)
		}
	}
	s.hist.floor = h.CompactRevision
	if s.hist.floor < 0 || s.hist.floor > s.revision {
		return nil, fmt.Errorf("%w: compact revision %d outside 0..%d", ErrBadSnapshot, s.hist.floor, s.revision)
	}
	if h.Version < 4 {
		// A version 3 change log holds the changes above its floor but not
		// the versions keys had at the floor, which reads at a past
		// revision need: the history starts at the snapshot's revision.
		if h.Version < 3 {
			s.hist.floor = h.Revision
		}
		if err := s.checkChangeLogV3(dec, h.Changes); err != nil {
			return nil, err
		}
		s.hist.floor = s.revision
	}
	if err := s.readHistory(dec, h.History); err != nil {
		return nil, err
	}
	var lonely error
	s.leases.Ascend(func(l *lease) bool {
		if l.anonymous && l.keyCount != 1 {
			lonely = fmt.Errorf("%w: anonymous lease %d has %d keys, not 1", ErrBadSnapshot, l.id, l.keyCount)
		}
		return lonely == nil
	})
	if lonely != nil {
		return nil, lonely
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the last key", ErrBadSnapshot)
	}
	return s, nil
}

// countingWriter counts the bytes WriteTo writes, for its result. It is
// the one byte counter of the backup path: the leader's backup store takes
// a backup's size from WriteTo rather than counting again.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// readHistory reads n versions, in key order, and checks that they are what
// Apply leaves: every revision above the floor, each numbered from op_index
// 0 without gaps, times never going back or past the state's clock; at or
// below the floor only puts that a later version of their key still needs;
// a version marked live is the key's live record. A hole would let a reader
// skip changes without ever being told the history was compacted.
func (s *State) readHistory(dec *json.Decoder, n int) error {
	h := &s.hist
	var prev *version
	for i := 0; i < n; i++ {
		var sv snapshotVersion
		if err := dec.Decode(&sv); err != nil {
			return fmt.Errorf("%w: history version %d of %d: %v", ErrBadSnapshot, i+1, n, err)
		}
		v := &version{rev: sv.Revision, op: sv.OpIndex, cause: causeOf(sv.Cause), now: sv.Now}
		bad := func(why string) error {
			return fmt.Errorf("%w: history version %d of %d (key %q, revision %d, op %d): %s", ErrBadSnapshot, i+1, n, sv.Key, v.rev, v.op, why)
		}
		// A delete, or a put of a key that existed, follows a put of its
		// key: above the floor, or as the key's version at the floor. A
		// delete points at the record it removed, that put's.
		samePut := prev != nil && prev.key() == sv.Key && !prev.isDelete()
		switch {
		case sv.Live:
			r := s.getRecord(sv.Key)
			if r == nil || r.modRevision != sv.Revision || sv.Record != nil {
				return bad("marked live, but it is not the key's live record")
			}
			v.rec = r
		case sv.Record != nil:
			sk := sv.Record
			if sk.Key != sv.Key || len(sk.Value) == 0 || sk.ModRevision != sv.Revision {
				return bad("its record does not match it")
			}
			v.rec = sk.record()
		}
		switch {
		case sv.Key == "" || v.cause == 0 || v.rev < 1 || v.rev > s.revision || v.op < 0 || v.now > s.now:
			return bad("out of range")
		case (v.rec == nil) != (v.cause != causePut):
			return bad("a put without a record, or a delete with one")
		case v.isDelete() && !samePut:
			return bad("a delete with no version of the key before it")
		case v.isDelete() && prev.rec.lease != sv.Lease:
			return bad("a delete whose lease is not the deleted record's")
		}
		if v.isDelete() {
			v.rec = prev.rec
		}
		switch {
		case prev != nil && !lessByKey(prev, v):
			return bad("out of order")
		case prev != nil && prev.key() == sv.Key && prev.rev <= h.floor && v.rev <= h.floor:
			return bad("two versions of one key at or below the floor")
		case v.rev <= h.floor && v.isDelete():
			return bad("a delete at or below the floor")
		case v.rev > h.floor && !v.isDelete() && v.rec.version > 1 && !samePut:
			return bad("no version of the key before it")
		}
		if prev != nil && prev.key() != sv.Key && prev.rev <= h.floor {
			return fmt.Errorf("%w: history: key %q keeps a version at the floor but no change after it", ErrBadSnapshot, prev.key())
		}
		h.byKey.ReplaceOrInsert(v)
		if v.rev > h.floor {
			h.byRev.ReplaceOrInsert(v)
		}
		prev = v
	}
	if prev != nil && prev.rev <= h.floor {
		return fmt.Errorf("%w: history: key %q keeps a version at the floor but no change after it", ErrBadSnapshot, prev.key())
	}
	// The change log: contiguous from the floor to the state's revision.
	var last *version
	var err error
	h.byRev.Ascend(func(v *version) bool {
		next := v.rev == h.floor+1 && v.op == 0
		if last != nil {
			next = (v.rev == last.rev && v.op == last.op+1) || (v.rev == last.rev+1 && v.op == 0)
		}
		if !next || (last != nil && v.now < last.now) {
			err = fmt.Errorf("%w: history change at revision %d, op %d (time %d) breaks the log's order", ErrBadSnapshot, v.rev, v.op, v.now)
		}
		last = v
		return err == nil
	})
	if err != nil {
		return err
	}
	if end := h.floor; h.floor < s.revision {
		if last != nil {
			end = last.rev
		}
		if end != s.revision {
			return fmt.Errorf("%w: the history ends at revision %d, not at the state's %d", ErrBadSnapshot, end, s.revision)
		}
	}
	// Every live key changed above the floor has that change in the history.
	s.kv.Ascend(func(r *record) bool {
		if r.modRevision > h.floor {
			if v := h.latest(r.key, r.modRevision); v == nil || v.written() != r {
				err = fmt.Errorf("%w: key %q changed at revision %d, above the floor, but its history does not say so", ErrBadSnapshot, r.key, r.modRevision)
			}
		}
		return err == nil
	})
	return err
}

// checkChangeLogV3 reads a version 3 change log and checks it is what Apply
// left: every revision above the floor, each numbered from op_index 0
// without gaps, times never going back or past the state's clock. The
// events are then dropped (see readSnapshot), but a snapshot whose log is
// broken is refused as it always was.
func (s *State) checkChangeLogV3(dec *json.Decoder, n int) error {
	var prev *snapshotChange
	for i := 0; i < n; i++ {
		var c snapshotChange
		if err := dec.Decode(&c); err != nil {
			return fmt.Errorf("%w: change %d of %d: %v", ErrBadSnapshot, i+1, n, err)
		}
		next := c.Event.Revision == s.hist.floor+1 && c.Event.OpIndex == 0
		if prev != nil {
			next = (c.Event.Revision == prev.Event.Revision && c.Event.OpIndex == prev.Event.OpIndex+1) ||
				(c.Event.Revision == prev.Event.Revision+1 && c.Event.OpIndex == 0)
		}
		if !next || c.Event.Revision > s.revision || c.Event.Key == "" || c.Now > s.now || (prev != nil && c.Now < prev.Now) {
			return fmt.Errorf("%w: change %d of %d (revision %d, op %d, time %d) breaks the log's order or range", ErrBadSnapshot, i+1, n, c.Event.Revision, c.Event.OpIndex, c.Now)
		}
		prev = &c
	}
	if last := int64(0); s.hist.floor < s.revision {
		if prev != nil {
			last = prev.Event.Revision
		}
		if last != s.revision {
			return fmt.Errorf("%w: the change log ends at revision %d, not at the state's %d", ErrBadSnapshot, last, s.revision)
		}
	}
	return nil
}
