package fsm

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"

	"github.com/google/btree"

	"github.com/concord-io/concord/schema"
)

// SnapshotFormat names the snapshot encoding; SnapshotVersion is bumped on
// any incompatible change, and Restore keeps reading every older version
// (fsm/testdata holds a golden file per version).
//
// Versions 1 to 4 are JSON lines (snapshot_json.go); version 5 is binary,
// in checksummed frames (snapshot_binary.go). Both are read into the same
// record values and checked by the same code (snapshot_restore.go), so a
// rule a snapshot must keep holds whatever its version.
const (
	SnapshotFormat  = "concord.fsm"
	SnapshotVersion = 5
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
	// tenant is the tenant whose space this is; tenants are the other
	// tenants' spaces, in name order, when this is the default one.
	tenant  string
	tenants []*Snapshot
	// status, movedTo and fencedAt are the tenant's move (move.go).
	status   byte
	movedTo  string
	fencedAt int64
	// quotas are the tenants' quotas (shared with the state: never
	// changed in place).
	quotas map[string]Quota
}

// snapshotHeader is what a snapshot says about itself before its records:
// the scalar state and how many records of each kind follow. Version 5
// stores the same fields in binary.
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
	// Tenant names the space a tenant frame starts (binary only): its
	// header gives the space's own fields and counts, and the cluster's
	// (revision, time, limits) are the snapshot header's; Status, MovedTo
	// and FencedAt its move.
	Tenant   string `json:"-"`
	Status   byte   `json:"-"`
	MovedTo  string `json:"-"`
	FencedAt int64  `json:"-"`
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
	// cause is Cause as stored (0 when unknown): the JSON reader maps the
	// name, the binary one reads the number.
	cause uint8
	// keyRef, when not 0, says the key is that of the keyRef'th record of
	// the keys section (binary only): Key, and the key of Record, are then
	// left for the restorer to fill.
	keyRef int
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
	// hash is Hash decoded, and hashOK whether it was a SHA-256: the JSON
	// reader decodes the hex, the binary one reads the 32 bytes.
	hash   [32]byte
	hashOK bool
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

// Snapshot captures the state, every tenant's space. Attachments and the
// deadline index are not captured: they are derived from the keys and
// leases on restore.
func (s *State) Snapshot() *Snapshot {
	sn := s.spaces[DefaultTenant].snapshot(s)
	for _, name := range s.names[1:] {
		sn.tenants = append(sn.tenants, s.spaces[name].snapshot(s))
	}
	sn.quotas = s.quotas
	return sn
}

func (sp *space) snapshot(s *State) *Snapshot {
	return &Snapshot{
		tenant:      sp.name,
		kv:          sp.kv.Clone(),
		leases:      sp.leases.Clone(),
		idem:        sp.idemBySeq.Clone(),
		idemSeq:     sp.idemSeq,
		hist:        sp.hist.clone(),
		revision:    s.revision,
		nextLeaseID: sp.nextLeaseID,
		now:         s.now,
		limits:      s.limits,
		status:      sp.status,
		movedTo:     sp.movedTo,
		fencedAt:    sp.fencedAt,
	}
}

// liveRecords returns the live records in key order, and how many of
// them changed above the floor: those whose live version the history
// holds, in the change log only.
func (sn *Snapshot) liveRecords() (recs []*record, above int) {
	recs = make([]*record, 0, sn.kv.Len())
	sn.kv.Ascend(func(r *record) bool {
		recs = append(recs, r)
		return true
	})
	// Apart from the walk, so that the records are read in a loop whose
	// reads do not wait for each other (see loadBatch).
	for _, r := range recs {
		if r.modRevision > sn.hist.floor {
			above++
		}
	}
	return recs, above
}

// ascendHistory calls f with every version of the history in key order,
// as a snapshot stores them, until f returns false: the key index's, and
// each key's live version after its others. recs are the live records in
// key order, above how many of them changed above the floor, and ref the
// place of v's key in recs (-1 when not live); v is the live version when
// ref >= 0 and recs[ref] == v.rec.
func (sn *Snapshot) ascendHistory(recs []*record, above int, f func(v *version, ref int) bool) bool {
	h := sn.hist
	liveOf := sn.liveVersions(above)
	cur := 0 // the next live record whose live version is not yet given
	// liveBefore gives the live versions of the records before key, or of
	// all that are left when all.
	liveBefore := func(key string, all bool) bool {
		for ; cur < len(recs) && (all || recs[cur].key < key); cur++ {
			if r := recs[cur]; r.modRevision > h.floor {
				if v := liveOf(r); v != nil && !f(v, cur) {
					cur++
					return false
				}
			}
		}
		return true
	}
	// The versions go to f a batch at a time, loaded first (loadVersions).
	ok := true
	batch := make([]*version, 0, loadBatch)
	give := func() bool {
		loadVersions(batch)
		for _, v := range batch {
			key := v.key()
			if !liveBefore(key, false) {
				return false
			}
			ref := -1
			if cur < len(recs) && recs[cur].key == key {
				ref = cur
			}
			if !f(v, ref) {
				return false
			}
		}
		batch = batch[:0]
		return true
	}
	h.byKey.Ascend(func(v *version) bool {
		if batch = append(batch, v); len(batch) == cap(batch) {
			ok = give()
		}
		return ok
	})
	return ok && give() && liveBefore("", true)
}

// A snapshot writer reads, for each version, the version, its record, the
// record's value and its key: four objects far apart in memory (the key
// index is in key order, the versions were made in revision order), each
// a cache miss that the next read depends on, so the writer spent most of
// its time waiting for memory (BenchmarkSnapshotEncodeHistory). It loads
// them a batch at a time instead, in loops whose loads do not depend on
// each other, which the processor overlaps; the encoding then finds them
// in the cache. loadBatch bounds what one batch brings in to a few tens
// of KiB.
const loadBatch = 128

// loadVersions reads the versions of vs, then their records, then their
// values' and keys' first bytes. What it returns is of no use: it is
// there so that the reads are not left out.
//
//go:noinline
func loadVersions(vs []*version) (n int) {
	for _, v := range vs {
		n += int(v.op)
	}
	for _, v := range vs {
		n += len(v.rec.value) + len(v.rec.key)
	}
	for _, v := range vs {
		if r := v.rec; len(r.value) > 0 && len(r.key) > 0 {
			n += int(r.value[0]) + int(r.key[0])
		}
	}
	return n
}

// loadRecords does for records what loadVersions does for versions.
//
//go:noinline
func loadRecords(rs []*record) (n int) {
	for _, r := range rs {
		n += len(r.value)
	}
	for _, r := range rs {
		if len(r.value) > 0 {
			n += int(r.value[0])
		}
	}
	return n
}

// liveVersions returns a function that finds the live version of a live
// record changed above the floor, for a walk that asks it of n records in
// key order. Such a record's revisions come in no order, so each would be
// a search of the change log (changeOf); when n is a fair share of the
// log, one pass over it instead notes each revision's first change, and a
// record's is that one (or, in a transaction, one of the few after it).
func (sn *Snapshot) liveVersions(n int) func(r *record) *version {
	h := sn.hist
	pivot := new(version) // for changeOf, reused
	search := func(r *record) *version { return h.changeOf(r, pivot) }
	span := sn.revision - h.floor
	if n*16 < h.byRev.Len() || span <= 0 || span > int64(h.byRev.Len()) {
		return search
	}
	first := make([]*version, span) // by revision, from the floor's next
	h.byRev.Ascend(func(v *version) bool {
		if i := v.rev - h.floor - 1; i >= 0 && i < span && first[i] == nil {
			first[i] = v
		}
		return true
	})
	return func(r *record) *version {
		if i := r.modRevision - h.floor - 1; i >= 0 && i < span {
			if v := first[i]; v != nil && v.rec == r && !v.isDelete() {
				return v
			}
		}
		return search(r)
	}
}

// WriteTo writes the snapshot in the current version (SnapshotVersion):
// leases by id, keys by key, idempotency entries by age, the history by
// key. The output is a function of the state alone, so equal states give
// equal bytes.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	return sn.WriteVersion(w, SnapshotVersion)
}

// WriteVersion writes the snapshot in an older version that still holds
// the whole state (4, JSON lines) or in the current one (5): a release
// that reads only version 4 can then be given a snapshot it reads. Other
// versions fail with ErrBadSnapshot.
func (sn *Snapshot) WriteVersion(w io.Writer, version int) (int64, error) {
	switch version {
	case 4:
		return sn.writeJSON(w)
	case binaryVersion:
		return sn.writeBinary(w)
	}
	return 0, fmt.Errorf("%w: cannot write version %d; this build writes versions 4 and 5", ErrBadSnapshot, version)
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

// Restore replaces the state with a snapshot of any version. On error the
// state is unchanged: the snapshot is read and checked whole into a new
// state, which replaces this one only once it is complete.
func (s *State) Restore(r io.Reader) error {
	ns, err := readSnapshot(r)
	if err != nil {
		return err
	}
	*s = *ns
	return nil
}

// snapshotSource reads the records of one snapshot encoding, section by
// section and in order, into the values both encodings share. It checks
// the encoding (syntax, integrity); what the values mean is checked once,
// for every version, by readSnapshot. A method fills the value it is given
// completely, and the value may hold slices the next call reuses only
// where its doc says so.
type snapshotSource interface {
	header() (snapshotHeader, error)
	lease(*snapshotLease) error
	key(*snapshotKV) error
	idem(*snapshotIdem) error
	// change reads a version 3 change-log entry.
	change(*snapshotChange) error
	version(*snapshotVersion) error
	// nextSpace reads what follows a space's last record: the header of
	// the next tenant's space, or nil at the end, having checked that
	// nothing follows.
	nextSpace() (*snapshotHeader, error)
}

// readSnapshot reads a snapshot of any version into a new state: JSON lines
// up to version 4, binary from version 5, told apart by the first byte.
func readSnapshot(r io.Reader) (*State, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	binary := false
	if first, err := br.Peek(1); err == nil && first[0] == binaryMagic[0] {
		binary = true
	}
	return restoreFrom(func(rs *restorer) snapshotSource {
		if binary {
			return newBinarySource(br, rs)
		}
		return newJSONSource(br)
	})
}
