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
	SnapshotVersion = 3
)

// Snapshot is a point-in-time copy of the state. Taking it is O(1): the
// trees are cloned copy-on-write, so Apply can go on while it is written.
type Snapshot struct {
	kv          *btree.BTreeG[*record]
	leases      *btree.BTreeG[*lease]
	idem        *btree.BTreeG[*idemEntry] // by insertion order
	idemSeq     uint64
	changes     *btree.BTreeG[*change]
	compactRev  int64
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
	// Since version 3: the change log and its floor.
	Changes         int   `json:"changes,omitempty"`
	CompactRevision int64 `json:"compact_revision,omitempty"`
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
}

// Snapshot captures the state. Attachments and the deadline index are not
// captured: they are derived from the keys and leases on restore.
func (s *State) Snapshot() *Snapshot {
	return &Snapshot{
		kv:          s.kv.Clone(),
		leases:      s.leases.Clone(),
		idem:        s.idemBySeq.Clone(),
		idemSeq:     s.idemSeq,
		changes:     s.changes.Clone(),
		compactRev:  s.compactRevision,
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
		Changes: sn.changes.Len(), CompactRevision: sn.compactRev,
	})
	sn.leases.Ascend(func(l *lease) bool {
		err = enc.Encode(snapshotLease{l.id, l.ttl, l.deadline, l.grantedRevision, l.anonymous, l.metadata})
		return err == nil
	})
	if err == nil {
		sn.kv.Ascend(func(r *record) bool {
			err = enc.Encode(snapshotKV{r.key, r.value, r.createRevision, r.modRevision, r.version, r.lease})
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
		sn.changes.Ascend(func(c *change) bool {
			err = enc.Encode(snapshotChange{c.now, c.event})
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
		rec := &record{key: sk.Key, value: sk.Value, createRevision: sk.CreateRevision, modRevision: sk.ModRevision, version: sk.Version, lease: sk.Lease}
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
	// Snapshots before version 3 carry no change log: the history before
	// them is unknown, so the floor is the snapshot's revision.
	s.compactRevision = h.CompactRevision
	if h.Version < 3 {
		s.compactRevision = h.Revision
	}
	if s.compactRevision < 0 || s.compactRevision > s.revision {
		return nil, fmt.Errorf("%w: compact revision %d outside 0..%d", ErrBadSnapshot, s.compactRevision, s.revision)
	}
	// The log must be what Apply leaves: every revision above the floor,
	// each numbered from op_index 0 without gaps, times never going back
	// or past the state's clock. A hole would let a reader skip events
	// without ever being told the log was compacted.
	var prev *change
	for i := 0; i < h.Changes; i++ {
		var sc snapshotChange
		if err := dec.Decode(&sc); err != nil {
			return nil, fmt.Errorf("%w: change %d of %d: %v", ErrBadSnapshot, i+1, h.Changes, err)
		}
		c := &change{event: sc.Event, now: sc.Now}
		next := c.event.Revision == s.compactRevision+1 && c.event.OpIndex == 0
		if prev != nil {
			next = (c.event.Revision == prev.event.Revision && c.event.OpIndex == prev.event.OpIndex+1) ||
				(c.event.Revision == prev.event.Revision+1 && c.event.OpIndex == 0)
		}
		if !next || c.event.Revision > s.revision || c.event.Key == "" || c.now > s.now || (prev != nil && c.now < prev.now) {
			return nil, fmt.Errorf("%w: change %d of %d (revision %d, op %d, time %d) breaks the log's order or range", ErrBadSnapshot, i+1, h.Changes, c.event.Revision, c.event.OpIndex, c.now)
		}
		s.changes.ReplaceOrInsert(c)
		prev = c
	}
	if last := int64(0); s.compactRevision < s.revision {
		if prev != nil {
			last = prev.event.Revision
		}
		if last != s.revision {
			return nil, fmt.Errorf("%w: the change log ends at revision %d, not at the state's %d", ErrBadSnapshot, last, s.revision)
		}
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
