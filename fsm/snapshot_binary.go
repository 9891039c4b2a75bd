package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Version 5 of the snapshot: binary, in checksummed frames, so that a
// restore reads at the speed of the disk and a torn or damaged file is
// refused before any of it is used.
//
//	snapshot = magic, frame...
//	magic    = "concord.fsm v5\n"
//	frame    = kind (1 byte), payload length (uvarint), payload,
//	           CRC-32C (Castagnoli) of kind, length and payload (4 bytes, little-endian)
//
// The frames, in order: one header frame ('H'); the leases ('L'), keys
// ('K'), idempotency entries ('I') and history versions ('V'), each
// section in as many frames as it needs (none when it is empty), a frame
// ending after the record that brings it to 64 KiB or to 4,096 records, a
// record never split across two frames; and an empty end frame ('E'), after
// which the stream ends. A frame's checksum is checked before any of its
// records is read.
//
// In the records, u is an unsigned varint, s a signed (zigzag) varint, and
// bytes a length (u) followed by that many bytes. Fields marked by a flag
// bit are present only when it is set, and a present field is never zero
// or empty (the reader refuses one that is), so the writer gives a state
// exactly one encoding.
//
//	header  s revision, s next_lease_id, s now, s max_leases,
//	        s max_keys_per_lease, s idempotency_entries,
//	        s idempotency_revisions, s history_revisions, s history_age_ms,
//	        u leases, u keys, u idempotency, u idempotency_seq,
//	        s compact_revision, u history
//	lease   flags (1 anonymous, 2 metadata), u id minus the previous
//	        lease's id, s ttl, s deadline minus the header's now,
//	        s granted_revision, [bytes metadata]
//	key     flags (1 lease, 2 content type, 4 metadata), key (below),
//	        bytes value, s create_revision, s mod_revision minus
//	        create_revision, s version, [s lease], [bytes content type],
//	        [bytes metadata]
//	idem    bytes key, 32 bytes hash, s revision, u seq, bytes reply
//	version flags (bits 0-2 the cause, 8 live, 16 record, 32 lease,
//	        64 op index, 128 key by reference), the key: u index in the
//	        keys section minus the last such index (by reference), or key
//	        (below, sharing with the previous key stored so); s revision
//	        and s now minus the previous version's,
//	        [u op_index], [s lease of a deleted key], [record]
//	record  flags (as a key's), bytes value, s revision minus
//	        create_revision, s mod_revision minus revision, s version,
//	        [s lease], [bytes content type], [bytes metadata]
//
// A key is stored as the length of the prefix it shares with the previous
// key of its section (u) and the rest (bytes): keys come in order, so
// neighbours share most of their bytes. A version of a key that is live
// names it by its place in the keys section, and a live version (the
// key's live record) is stated by its revision, op index and time alone:
// a key written once costs its key section record and a few bytes here.

// binaryMagic starts every binary snapshot; the version and a newline
// follow it. binaryVersion is the version this file writes.
const (
	binaryMagic   = SnapshotFormat + " v"
	binaryVersion = 5
)

// Frame kinds.
const (
	frameHeader  = 'H'
	frameLeases  = 'L'
	frameKeys    = 'K'
	frameIdem    = 'I'
	frameHistory = 'V'
	frameTenant  = 'T'
	frameQuota   = 'Q'
	frameEnd     = 'E'
)

func frameName(kind byte) string {
	switch kind {
	case frameHeader:
		return "header"
	case frameLeases:
		return "lease"
	case frameKeys:
		return "key"
	case frameIdem:
		return "idempotency"
	case frameHistory:
		return "history"
	case frameTenant:
		return "tenant"
	case frameQuota:
		return "quota"
	case frameEnd:
		return "end"
	}
	return fmt.Sprintf("unknown (%#x)", kind)
}

const (
	// frameTarget is the payload size after which a frame ends, and
	// frameRecords the number of records: a reader decodes a frame at a
	// time, and versions of a few bytes each would make 64 KiB a lot of
	// them.
	frameTarget  = 64 << 10
	frameRecords = 4096
	// maxFrame bounds a frame's payload: one record (a value, its
	// metadata) is far smaller. A length above it is damage.
	maxFrame = 1 << 30
	// frameReserve is room for a frame's kind and length, kept in front
	// of the payload so that a frame is written in one call.
	frameReserve = 1 + binary.MaxVarintLen64
	// maxCount bounds each count of the header: far more records than
	// memory holds, far fewer than an int counts.
	maxCount = 1 << 40
)

// Flag bits of the records.
const (
	flagAnonymous = 1 // lease
	flagLeaseMeta = 2 // lease

	flagLease       = 1 // key and record
	flagContentType = 2 // key and record
	flagMetadata    = 4 // key and record

	flagCause  = 7 // version: the low three bits
	flagLive   = 8
	flagRecord = 16
	flagDelete = 32 // the lease of a deleted key
	flagOp     = 64
	flagRef    = 128
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// binaryWriter writes frames. Its error is sticky: once a write fails,
// nothing more is written and the error is returned at the end.
type binaryWriter struct {
	w       io.Writer
	buf     []byte // frameReserve bytes of room, then the payload
	kind    byte
	records int // in the frame being written
	n       int64
	err     error
}

func (bw *binaryWriter) write(p []byte) {
	if bw.err != nil {
		return
	}
	n, err := bw.w.Write(p)
	bw.n += int64(n)
	bw.err = err
}

// start begins a frame of kind.
func (bw *binaryWriter) start(kind byte) {
	bw.kind = kind
	bw.buf, bw.records = bw.buf[:frameReserve], 0
}

// endRecord ends the frame if the record just appended filled it.
func (bw *binaryWriter) endRecord() {
	if bw.records++; bw.records >= frameRecords || len(bw.buf)-frameReserve >= frameTarget {
		bw.flush()
	}
}

// endSection writes what is left of a section.
func (bw *binaryWriter) endSection() {
	if len(bw.buf) > frameReserve {
		bw.flush()
	}
}

// flush writes the frame and starts another of the same kind.
func (bw *binaryWriter) flush() {
	var hdr [frameReserve]byte
	hdr[0] = bw.kind
	h := 1 + binary.PutUvarint(hdr[1:], uint64(len(bw.buf)-frameReserve))
	start := frameReserve - h
	copy(bw.buf[start:], hdr[:h])
	bw.buf = binary.LittleEndian.AppendUint32(bw.buf, crc32.Checksum(bw.buf[start:], castagnoli))
	bw.write(bw.buf[start:])
	bw.buf, bw.records = bw.buf[:frameReserve], 0
}

func appendBytes(p, b []byte) []byte {
	return append(binary.AppendUvarint(p, uint64(len(b))), b...)
}

func appendString(p []byte, s string) []byte {
	return append(binary.AppendUvarint(p, uint64(len(s))), s...)
}

// appendKey appends key as the prefix it shares with prev and the rest.
func appendKey(p []byte, prev, key string) []byte {
	shared := 0
	for shared < len(prev) && shared < len(key) && prev[shared] == key[shared] {
		shared++
	}
	return appendString(binary.AppendUvarint(p, uint64(shared)), key[shared:])
}

// recordFlags are the flags of a key or record: which optional fields follow.
func recordFlags(k *snapshotKV) byte {
	var f byte
	if k.Lease != 0 {
		f |= flagLease
	}
	if k.ContentType != "" {
		f |= flagContentType
	}
	if len(k.Metadata) > 0 {
		f |= flagMetadata
	}
	return f
}

// appendOptional appends the optional fields of a key or record.
func appendOptional(p []byte, k *snapshotKV, f byte) []byte {
	if f&flagLease != 0 {
		p = binary.AppendVarint(p, k.Lease)
	}
	if f&flagContentType != 0 {
		p = appendString(p, k.ContentType)
	}
	if f&flagMetadata != 0 {
		p = appendBytes(p, k.Metadata)
	}
	return p
}

// binaryEncoder writes version 5 a record at a time, from the values the
// readers produce. It writes what it is given, consistent or not (tests
// write broken snapshots with it); writeBinary gives it a state.
type binaryEncoder struct {
	binaryWriter
	now     int64  // the header's
	leaseID int64  // the previous lease's id
	key     string // the previous key of the keys section
	// The previous history version's revision and time, the previous key
	// stored in full, and the last key referred to.
	hRev, hNow int64
	hKey       string
	ref        int
}

func newBinaryEncoder(w io.Writer) *binaryEncoder {
	e := &binaryEncoder{binaryWriter: binaryWriter{w: w, buf: make([]byte, frameReserve, frameReserve+frameTarget+4096)}}
	e.write([]byte(binaryMagic + strconv.Itoa(binaryVersion) + "\n"))
	return e
}

// header writes the header frame; the counts are written as given.
func (e *binaryEncoder) header(h *snapshotHeader) {
	e.start(frameHeader)
	p := e.buf
	for _, v := range []int64{h.Revision, h.NextLeaseID, h.Now, h.Limits.MaxLeases, h.Limits.MaxKeysPerLease,
		h.Limits.IdempotencyEntries, h.Limits.IdempotencyRevisions, h.Limits.HistoryRevisions, h.Limits.HistoryAgeMS} {
		p = binary.AppendVarint(p, v)
	}
	e.buf = appendSpaceCounts(p, h)
	e.flush()
	e.now = h.Now
}

func (e *binaryEncoder) lease(l *snapshotLease) {
	var f byte
	if l.Anonymous {
		f |= flagAnonymous
	}
	if len(l.Metadata) > 0 {
		f |= flagLeaseMeta
	}
	p := append(e.buf, f)
	p = binary.AppendUvarint(p, uint64(l.ID-e.leaseID))
	p = binary.AppendVarint(p, l.TTL)
	p = binary.AppendVarint(p, l.Deadline-e.now)
	p = binary.AppendVarint(p, l.GrantedRevision)
	if f&flagLeaseMeta != 0 {
		p = appendBytes(p, l.Metadata)
	}
	e.buf, e.leaseID = p, l.ID
	e.endRecord()
}

func (e *binaryEncoder) kv(k *snapshotKV) {
	f := recordFlags(k)
	p := append(e.buf, f)
	p = appendKey(p, e.key, k.Key)
	p = appendBytes(p, k.Value)
	p = binary.AppendVarint(p, k.CreateRevision)
	p = binary.AppendVarint(p, k.ModRevision-k.CreateRevision)
	p = binary.AppendVarint(p, k.Version)
	e.buf, e.key = appendOptional(p, k, f), k.Key
	e.endRecord()
}

func (e *binaryEncoder) idem(i *snapshotIdem) {
	p := appendString(e.buf, i.Key)
	p = append(p, i.hash[:]...)
	p = binary.AppendVarint(p, i.Revision)
	p = binary.AppendUvarint(p, i.Seq)
	e.buf = appendBytes(p, i.Reply)
	e.endRecord()
}

// version writes a history version. ref is the place of its key in the
// keys section, or -1 when it is not there; refs never go back.
func (e *binaryEncoder) version(v *snapshotVersion, ref int) {
	f := v.cause & flagCause
	if v.Live {
		f |= flagLive
	}
	if v.Record != nil {
		f |= flagRecord
	}
	if v.Lease != 0 {
		f |= flagDelete
	}
	if v.OpIndex != 0 {
		f |= flagOp
	}
	if ref >= 0 {
		f |= flagRef
	}
	p := append(e.buf, f)
	if ref >= 0 {
		p = binary.AppendUvarint(p, uint64(ref-e.ref))
		e.ref = ref
	} else {
		p = appendKey(p, e.hKey, v.Key)
		e.hKey = v.Key
	}
	p = binary.AppendVarint(p, v.Revision-e.hRev)
	p = binary.AppendVarint(p, v.Now-e.hNow)
	if f&flagOp != 0 {
		p = binary.AppendUvarint(p, uint64(v.OpIndex))
	}
	if f&flagDelete != 0 {
		p = binary.AppendVarint(p, v.Lease)
	}
	if r := v.Record; r != nil {
		rf := recordFlags(r)
		p = append(p, rf)
		p = appendBytes(p, r.Value)
		p = binary.AppendVarint(p, v.Revision-r.CreateRevision)
		p = binary.AppendVarint(p, r.ModRevision-v.Revision)
		p = binary.AppendVarint(p, r.Version)
		p = appendOptional(p, r, rf)
	}
	e.buf = p
	e.hRev, e.hNow = v.Revision, v.Now
	e.endRecord()
}

// appendSpaceCounts appends what spaceCounts reads.
func appendSpaceCounts(p []byte, h *snapshotHeader) []byte {
	p = binary.AppendUvarint(p, uint64(h.Leases))
	p = binary.AppendUvarint(p, uint64(h.Keys))
	p = binary.AppendUvarint(p, uint64(h.Idempotency))
	p = binary.AppendUvarint(p, h.IdempotencySeq)
	p = binary.AppendVarint(p, h.CompactRevision)
	return binary.AppendUvarint(p, uint64(h.History))
}

// tenant writes the frame that starts a tenant's space, and starts the
// deltas of its sections afresh.
func (e *binaryEncoder) tenant(h *snapshotHeader) {
	e.start(frameTenant)
	p := appendString(e.buf, h.Tenant)
	p = binary.AppendVarint(p, h.NextLeaseID)
	p = appendSpaceCounts(p, h)
	p = append(p, h.Status)
	p = appendString(p, h.MovedTo)
	e.buf = binary.AppendVarint(p, h.FencedAt)
	e.flush()
	e.leaseID, e.key, e.hRev, e.hNow, e.hKey, e.ref = 0, "", 0, 0, "", 0
}

// finish writes the end frame and returns the bytes written.
func (e *binaryEncoder) finish() (int64, error) {
	e.start(frameEnd)
	e.flush()
	if e.err != nil {
		return e.n, fmt.Errorf("write snapshot: %w", e.err)
	}
	return e.n, nil
}

// writeBinary writes version 5: the default tenant's space after the
// header, then each other tenant's after a tenant frame, then the end.
func (sn *Snapshot) writeBinary(w io.Writer) (int64, error) {
	e := newBinaryEncoder(w)
	sn.writeSpace(e, e.header)
	for _, t := range sn.tenants {
		t.writeSpace(e, e.tenant)
	}
	if len(sn.quotas) > 0 {
		// After the spaces, so that a snapshot without quotas is what
		// it was before they existed.
		names := make([]string, 0, len(sn.quotas))
		for n := range sn.quotas {
			names = append(names, n)
		}
		slices.Sort(names)
		e.start(frameQuota)
		for _, n := range names {
			p := appendString(e.buf, n)
			for _, v := range sn.quotas[n].fields() {
				p = binary.AppendVarint(p, v)
			}
			e.buf = p
			e.endRecord()
		}
		e.endSection()
	}
	return e.finish()
}

// writeSpace writes a space's sections after the frame start writes.
func (sn *Snapshot) writeSpace(e *binaryEncoder, start func(*snapshotHeader)) {
	// The live records, in key order: the history names a live key by its
	// place here, and finds its live record by walking this alongside.
	recs, live := sn.liveRecords()
	start(&snapshotHeader{
		Revision: sn.revision, NextLeaseID: sn.nextLeaseID, Now: sn.now, Limits: sn.limits,
		Leases: sn.leases.Len(), Keys: len(recs),
		Idempotency: sn.idem.Len(), IdempotencySeq: sn.idemSeq,
		History: sn.hist.byKey.Len() + live, CompactRevision: sn.hist.floor,
		Tenant: sn.tenant, Status: sn.status, MovedTo: sn.movedTo, FencedAt: sn.fencedAt,
	})

	e.start(frameLeases)
	sn.leases.Ascend(func(l *lease) bool {
		e.lease(&snapshotLease{l.id, l.ttl, l.deadline, l.grantedRevision, l.anonymous, l.metadata})
		return e.err == nil
	})
	e.endSection()

	e.start(frameKeys)
	for i, r := range recs {
		if i%loadBatch == 0 {
			loadRecords(recs[i:min(i+loadBatch, len(recs))])
		}
		sk := snapshotKVOf(r)
		e.kv(&sk)
		if e.err != nil {
			break
		}
	}
	e.endSection()

	e.start(frameIdem)
	sn.idem.Ascend(func(i *idemEntry) bool {
		e.idem(&snapshotIdem{Key: i.key, hash: i.hash, Revision: i.revision, Seq: i.seq, Reply: i.reply})
		return e.err == nil
	})
	e.endSection()

	e.start(frameHistory)
	var rec snapshotKV // reused: the encoder keeps nothing
	sn.ascendHistory(recs, live, func(v *version, ref int) bool {
		sv := snapshotVersion{Key: v.key(), Revision: v.rev, OpIndex: v.op, Now: v.now, cause: v.cause}
		switch {
		case v.isDelete():
			sv.Lease = v.rec.lease
		case ref >= 0 && recs[ref] == v.rec:
			sv.Live = true
		default:
			rec = snapshotKVOf(v.rec)
			sv.Record = &rec
		}
		e.version(&sv, ref)
		return e.err == nil
	})
	e.endSection()
}

// Reading version 5 is split in two: a binaryDecoder reads frames, checks
// them and decodes each into a batch of records, and a binarySource hands
// the records of the batches to the restorer one at a time. The decoder
// runs in its own goroutine, a few batches ahead, while the restorer
// checks and places the records it already has (when the restore is
// concurrent; otherwise a batch is decoded when the restorer needs it).

// maxBatches bounds the batches a decoder goroutine fills: the one the
// restorer reads, the one being decoded, and the rest waiting.
const maxBatches = 6

// binaryBatch holds the records of one frame.
type binaryBatch struct {
	kind   byte
	n      int // records decoded
	leases []snapshotLease
	kvs    []snapshotKV // keys; for a history frame, the records of versions
	idems  []snapshotIdem
	vers   []snapshotVersion
	// tenant is the header a tenant frame holds.
	tenant *snapshotHeader
	// quotas are the records of a quota frame.
	quotas []quotaRecord
	// err ends the batch: the frame could not be read, or its record n+1
	// could not be decoded, or (for the end frame) data follows it.
	err error
}

func (bb *binaryBatch) reset(kind byte) {
	*bb = binaryBatch{kind: kind, leases: bb.leases[:0], kvs: bb.kvs[:0], idems: bb.idems[:0], vers: bb.vers[:0], quotas: bb.quotas[:0]}
}

// binaryDecoder reads frames. Every length is checked against what is
// left of its frame, and a frame is read into memory only as its bytes
// arrive, so damaged or hostile input costs at most about its own size.
type binaryDecoder struct {
	r     *bufio.Reader
	frame []byte // the current frame's payload, reused from frame to frame
	pos   int    // the next record in frame
	kind  byte
	// err is the first error decoding the current record: the record's
	// fields read as zero after it, and the record returns it.
	err error

	now     int64  // the header's: lease deadlines are stored relative to it
	leaseID int64  // the previous lease's id
	keys    int    // how many keys the keys section held
	prevKey string // the previous key of the keys section
	// The previous history version's revision and time, the previous key
	// stored in full, and the last key referred to.
	hRev, hNow int64
	hKey       string
	ref        int
	scratch    []byte // where a key is put together
	arena      []byte // what is left of the current arena of values
}

var errRecordPastFrame = errors.New("a record runs past the end of its frame")

// nextFrame reads the next frame and checks its checksum.
func (d *binaryDecoder) nextFrame() error {
	unexpected := func(err error) error {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("truncated: %w", err)
	}
	kind, err := d.r.ReadByte()
	if err != nil {
		return unexpected(err)
	}
	n, err := binary.ReadUvarint(d.r)
	if err != nil {
		return unexpected(err)
	}
	if n > maxFrame {
		return fmt.Errorf("a %s frame of %d bytes, more than the %d a frame may hold", frameName(kind), n, maxFrame)
	}
	// Grow the buffer as the bytes come, not by what the length says.
	d.frame = d.frame[:0]
	for uint64(len(d.frame)) < n {
		chunk := int(min(n-uint64(len(d.frame)), 1<<20))
		d.frame = slices.Grow(d.frame, chunk)
		at := len(d.frame)
		d.frame = d.frame[:at+chunk]
		if _, err := io.ReadFull(d.r, d.frame[at:]); err != nil {
			return unexpected(err)
		}
	}
	var sum [4]byte
	if _, err := io.ReadFull(d.r, sum[:]); err != nil {
		return unexpected(err)
	}
	var hdr [frameReserve]byte
	hdr[0] = kind
	h := 1 + binary.PutUvarint(hdr[1:], n)
	crc := crc32.Update(crc32.Checksum(hdr[:h], castagnoli), castagnoli, d.frame)
	if crc != binary.LittleEndian.Uint32(sum[:]) {
		return fmt.Errorf("the checksum of a %s frame of %d bytes does not match: the snapshot is damaged", frameName(kind), n)
	}
	d.kind, d.pos, d.err = kind, 0, nil
	return nil
}

// decodeFrame reads the next frame and decodes all of its records into bb.
func (d *binaryDecoder) decodeFrame(bb *binaryBatch) {
	if err := d.nextFrame(); err != nil {
		bb.reset(0)
		bb.err = err
		return
	}
	bb.reset(d.kind)
	if len(d.frame) == 0 && d.kind != frameEnd {
		bb.err = fmt.Errorf("an empty %s frame", frameName(d.kind))
		return
	}
	for d.pos < len(d.frame) && d.err == nil {
		switch d.kind {
		case frameLeases:
			bb.leases = append(bb.leases, snapshotLease{})
			d.lease(&bb.leases[len(bb.leases)-1])
		case frameKeys:
			bb.kvs = append(bb.kvs, snapshotKV{})
			d.key(&bb.kvs[len(bb.kvs)-1])
		case frameIdem:
			bb.idems = append(bb.idems, snapshotIdem{})
			d.idem(&bb.idems[len(bb.idems)-1])
		case frameHistory:
			bb.vers = append(bb.vers, snapshotVersion{})
			d.version(&bb.vers[len(bb.vers)-1], bb)
		case frameTenant:
			if bb.n > 0 {
				d.fail(errors.New("a tenant frame with more than one record"))
				break
			}
			bb.tenant = d.tenant()
		case frameQuota:
			r := quotaRecord{name: string(d.bytes())}
			f := make([]int64, 5)
			for i := range f {
				f[i] = d.varint()
			}
			r.quota = quotaOf(f)
			bb.quotas = append(bb.quotas, r)
		case frameEnd:
			d.fail(errors.New("an end frame that is not empty"))
		default:
			d.fail(fmt.Errorf("a frame of kind %s", frameName(d.kind)))
		}
		if d.err == nil {
			bb.n++
		}
	}
	bb.err = d.err
	if bb.err == nil && d.kind == frameHistory {
		// The records of the versions, now that kvs no longer moves.
		j := 0
		for i := range bb.vers {
			if bb.vers[i].Record != nil {
				bb.vers[i].Record = &bb.kvs[j]
				j++
			}
		}
	}
	if bb.err == nil && d.kind == frameEnd {
		if _, err := d.r.ReadByte(); err != io.EOF {
			bb.err = errors.New("data after the end frame")
			if err != nil {
				bb.err = err
			}
		}
	}
}

func (d *binaryDecoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.pos = len(d.frame)
}

func (d *binaryDecoder) byte1() byte {
	if d.pos >= len(d.frame) {
		d.fail(errRecordPastFrame)
		return 0
	}
	d.pos++
	return d.frame[d.pos-1]
}

func (d *binaryDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.frame[d.pos:])
	if n <= 0 {
		d.fail(errRecordPastFrame)
		return 0
	}
	d.pos += n
	return v
}

func (d *binaryDecoder) varint() int64 {
	v, n := binary.Varint(d.frame[d.pos:])
	if n <= 0 {
		d.fail(errRecordPastFrame)
		return 0
	}
	d.pos += n
	return v
}

// take returns the next n bytes of the frame, which the next frame
// overwrites.
func (d *binaryDecoder) take(n uint64) []byte {
	if n > uint64(len(d.frame)-d.pos) {
		d.fail(errRecordPastFrame)
		return nil
	}
	p := d.frame[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return p
}

// bytes returns a copy of the next length-prefixed bytes, nil when empty.
// The copy is exactly sized (its capacity is its length, so an append to
// it never writes over its neighbour), in an arena when small.
func (d *binaryDecoder) bytes() []byte {
	p := d.take(d.uvarint())
	if len(p) == 0 {
		return nil
	}
	if len(p) <= arenaMaxItem {
		if len(d.arena) < len(p) {
			d.arena = make([]byte, arenaSize)
		}
		v := d.arena[:len(p):len(p)]
		d.arena = d.arena[len(p):]
		copy(v, p)
		return v
	}
	return append(make([]byte, 0, len(p)), p...)
}

// present reads a field a flag marks present: never empty.
func (d *binaryDecoder) present(what string) []byte {
	p := d.bytes()
	if p == nil {
		d.fail(fmt.Errorf("%s marked present but empty", what))
	}
	return p
}

// nonZero reads a signed field a flag marks present: never zero.
func (d *binaryDecoder) nonZero(what string) int64 {
	v := d.varint()
	if v == 0 {
		d.fail(fmt.Errorf("%s marked present but 0", what))
	}
	return v
}

// prefixed reads a key stored as the prefix it shares with prev and the
// rest.
func (d *binaryDecoder) prefixed(prev string) string {
	shared := d.uvarint()
	rest := d.take(d.uvarint())
	switch {
	case d.err != nil:
		return ""
	case shared > uint64(len(prev)):
		d.fail(fmt.Errorf("a key shares %d bytes with a key of %d", shared, len(prev)))
		return ""
	case int(shared) == len(prev) && len(rest) == 0:
		return prev
	}
	d.scratch = append(append(d.scratch[:0], prev[:shared]...), rest...)
	return string(d.scratch)
}

// optional reads the optional fields of a key or record into k.
func (d *binaryDecoder) optional(k *snapshotKV, f byte) {
	if f&^(flagLease|flagContentType|flagMetadata) != 0 {
		d.fail(fmt.Errorf("unknown flags %#x", f))
	}
	if f&flagLease != 0 {
		k.Lease = d.nonZero("lease")
	}
	if f&flagContentType != 0 {
		k.ContentType = string(d.present("content type"))
	}
	if f&flagMetadata != 0 {
		k.Metadata = d.present("metadata")
	}
}

// header reads the magic line and the header frame.
func (d *binaryDecoder) header() (snapshotHeader, error) {
	var h snapshotHeader
	fail := func(format string, args ...any) (snapshotHeader, error) {
		return h, fmt.Errorf("%w: header: "+format, append([]any{ErrBadSnapshot}, args...)...)
	}
	// The magic line: the format, " v", the version, a newline.
	var line []byte
	for len(line) <= len(binaryMagic)+8 {
		c, err := d.r.ReadByte()
		if err != nil {
			return fail("%v", err)
		}
		if c == '\n' {
			break
		}
		line = append(line, c)
	}
	digits, ok := strings.CutPrefix(string(line), binaryMagic)
	version, err := strconv.Atoi(digits)
	if !ok || err != nil || strconv.Itoa(version) != digits {
		return fail("the first line is %.40q, not %q", line, binaryMagic+strconv.Itoa(SnapshotVersion))
	}
	h.Format, h.Version = SnapshotFormat, version
	if version < binaryVersion || version > SnapshotVersion {
		return fail("format %q version %d in binary, this build reads %q versions %d to %d in binary", h.Format, version, SnapshotFormat, binaryVersion, SnapshotVersion)
	}
	if err := d.nextFrame(); err != nil {
		return fail("%v", err)
	}
	if d.kind != frameHeader {
		return fail("%s records where the header is due", frameName(d.kind))
	}
	var fields [9]int64
	for i := range fields {
		fields[i] = d.varint()
	}
	h.Revision, h.NextLeaseID, h.Now = fields[0], fields[1], fields[2]
	h.Limits = Limits{MaxLeases: fields[3], MaxKeysPerLease: fields[4], IdempotencyEntries: fields[5],
		IdempotencyRevisions: fields[6], HistoryRevisions: fields[7], HistoryAgeMS: fields[8]}
	d.spaceCounts(&h)
	if d.err == nil && d.pos != len(d.frame) {
		d.fail(errors.New("data after the header's fields"))
	}
	if d.err != nil {
		return fail("%v", d.err)
	}
	d.now = h.Now
	return h, nil
}

// spaceCounts reads what a header and a tenant frame both give of their
// space: how many records of each section follow, the idempotency
// sequence and the floor.
func (d *binaryDecoder) spaceCounts(h *snapshotHeader) {
	count := func() int {
		n := d.uvarint()
		if n > maxCount {
			d.fail(fmt.Errorf("a count of %d", n))
		}
		return int(n)
	}
	h.Leases, h.Keys, h.Idempotency = count(), count(), count()
	h.IdempotencySeq = d.uvarint()
	h.CompactRevision = d.varint()
	h.History = count()
}

// tenant reads a tenant frame's header, and starts the deltas of the
// space's sections afresh, as the writer does.
func (d *binaryDecoder) tenant() *snapshotHeader {
	h := &snapshotHeader{Tenant: string(d.bytes()), NextLeaseID: d.varint()}
	d.spaceCounts(h)
	h.Status = d.byte1()
	h.MovedTo = string(d.bytes())
	h.FencedAt = d.varint()
	d.leaseID, d.keys, d.prevKey, d.hRev, d.hNow, d.hKey, d.ref = 0, 0, "", 0, 0, "", 0
	return h
}

func (d *binaryDecoder) lease(l *snapshotLease) {
	f := d.byte1()
	if f&^(flagAnonymous|flagLeaseMeta) != 0 {
		d.fail(fmt.Errorf("unknown lease flags %#x", f))
	}
	*l = snapshotLease{Anonymous: f&flagAnonymous != 0}
	l.ID = d.leaseID + int64(d.uvarint())
	l.TTL = d.varint()
	l.Deadline = d.now + d.varint()
	l.GrantedRevision = d.varint()
	if f&flagLeaseMeta != 0 {
		l.Metadata = d.present("metadata")
	}
	d.leaseID = l.ID
}

func (d *binaryDecoder) key(k *snapshotKV) {
	f := d.byte1()
	*k = snapshotKV{Key: d.prefixed(d.prevKey)}
	k.Value = d.bytes()
	k.CreateRevision = d.varint()
	k.ModRevision = k.CreateRevision + d.varint()
	k.Version = d.varint()
	d.optional(k, f)
	d.prevKey = k.Key
	d.keys++
}

func (d *binaryDecoder) idem(e *snapshotIdem) {
	*e = snapshotIdem{Key: string(d.take(d.uvarint()))}
	e.hashOK = copy(e.hash[:], d.take(uint64(len(e.hash)))) == len(e.hash)
	e.Revision = d.varint()
	e.Seq = d.uvarint()
	e.Reply = d.bytes()
}

// version decodes a history version; its record, if any, goes to the end
// of bb.kvs, and decodeFrame points Record at it.
func (d *binaryDecoder) version(v *snapshotVersion, bb *binaryBatch) {
	f := d.byte1()
	*v = snapshotVersion{cause: f & flagCause, Live: f&flagLive != 0}
	if f&flagRef != 0 {
		i := d.uvarint()
		if i >= uint64(d.keys-d.ref) {
			d.fail(fmt.Errorf("a reference %d keys past key %d, beyond the %d keys", i, d.ref, d.keys))
		} else {
			d.ref += int(i)
			v.keyRef = d.ref + 1
		}
	} else {
		v.Key = d.prefixed(d.hKey)
		d.hKey = v.Key
	}
	d.hRev += d.varint()
	d.hNow += d.varint()
	v.Revision, v.Now = d.hRev, d.hNow
	if f&flagOp != 0 {
		op := d.uvarint()
		if op == 0 || op > math.MaxInt32 {
			d.fail(fmt.Errorf("op index %d", op))
		}
		v.OpIndex = int32(op)
	}
	if f&flagDelete != 0 {
		v.Lease = d.nonZero("lease")
	}
	if f&flagRecord != 0 {
		rf := d.byte1()
		// The key is the version's; the restorer sets it for a key by
		// reference.
		rec := snapshotKV{Key: v.Key}
		rec.Value = d.bytes()
		rec.CreateRevision = v.Revision - d.varint()
		rec.ModRevision = v.Revision + d.varint()
		rec.Version = d.varint()
		d.optional(&rec, rf)
		bb.kvs = append(bb.kvs, rec)
		v.Record = &bb.kvs[len(bb.kvs)-1] // until kvs moves: decodeFrame sets it again
	}
}

// binarySource hands the restorer the records of the decoded batches.
type binarySource struct {
	dec *binaryDecoder
	rs  *restorer
	// batches delivers the decoded batches when a goroutine decodes them;
	// free takes them back for reuse.
	batches chan *binaryBatch
	free    chan *binaryBatch
	stop    chan struct{}
	cur     *binaryBatch
	i       int // the next record of cur
}

func newBinarySource(r *bufio.Reader, rs *restorer) *binarySource {
	return &binarySource{dec: &binaryDecoder{r: r}, rs: rs}
}

func (s *binarySource) header() (snapshotHeader, error) { return s.dec.header() }

// nextBatch returns the next decoded batch, starting the decoder
// goroutine the first time when the restore is concurrent.
func (s *binarySource) nextBatch() *binaryBatch {
	if !restoreConcurrently {
		bb := s.cur
		if bb == nil {
			bb = &binaryBatch{}
		}
		s.dec.decodeFrame(bb)
		return bb
	}
	if s.batches == nil {
		s.batches = make(chan *binaryBatch, maxBatches-2)
		s.free = make(chan *binaryBatch, maxBatches)
		s.stop = make(chan struct{})
		batches, free, stop := s.batches, s.free, s.stop
		s.rs.goBuild(func() {
			made := 0
			for {
				// A batch given back, or a new one while there are
				// few: the decoder stays a few frames ahead.
				var bb *binaryBatch
				select {
				case bb = <-free:
				default:
					if made < maxBatches {
						bb, made = &binaryBatch{}, made+1
						break
					}
					select {
					case bb = <-free:
					case <-stop:
						return
					}
				}
				s.dec.decodeFrame(bb)
				select {
				case batches <- bb:
				case <-stop:
					return
				}
				if bb.err != nil || bb.kind == frameEnd {
					return
				}
			}
		})
		// If the restore ends early, the decoder stops at its next batch.
		s.rs.closers = append(s.rs.closers, func() { close(stop) })
	}
	if s.cur != nil {
		select {
		case s.free <- s.cur:
		default:
		}
	}
	return <-s.batches
}

// record returns the index in s.cur of the next record, of kind. A frame
// that does not decode whole is refused before any of its records is
// used.
func (s *binarySource) record(kind byte) (int, error) {
	if c := s.cur; c != nil && s.i < c.n {
		if c.kind != kind {
			return 0, fmt.Errorf("more %s records than the header counts", frameName(c.kind))
		}
		s.i++
		return s.i - 1, nil
	}
	c := s.nextBatch()
	s.cur, s.i = c, 0
	switch {
	case c.err != nil:
		return 0, c.err
	case c.kind != kind:
		return 0, fmt.Errorf("%s records where %s records are due", frameName(c.kind), frameName(kind))
	case c.n == 0: // decodeFrame refuses an empty frame: never here
		return 0, fmt.Errorf("an empty %s frame", frameName(kind))
	}
	s.i++
	return 0, nil
}

func (s *binarySource) lease(l *snapshotLease) error {
	i, err := s.record(frameLeases)
	if err == nil {
		*l = s.cur.leases[i]
	}
	return err
}

func (s *binarySource) key(k *snapshotKV) error {
	i, err := s.record(frameKeys)
	if err == nil {
		*k = s.cur.kvs[i]
	}
	return err
}

func (s *binarySource) idem(e *snapshotIdem) error {
	i, err := s.record(frameIdem)
	if err == nil {
		*e = s.cur.idems[i]
	}
	return err
}

// change: version 5 has no change log (it has a history).
func (s *binarySource) change(*snapshotChange) error {
	return errors.New("a version 5 snapshot has no change log")
}

// version gives a version whose Record, if any, stays valid until the
// next call.
func (s *binarySource) version(v *snapshotVersion) error {
	i, err := s.record(frameHistory)
	if err == nil {
		*v = s.cur.vers[i]
	}
	return err
}

func (s *binarySource) nextSpace() (*snapshotHeader, error) {
	if c := s.cur; c != nil && s.i < c.n {
		return nil, fmt.Errorf("more %s records than the header counts", frameName(c.kind))
	}
	for {
		c := s.nextBatch()
		s.cur, s.i = c, 0
		switch {
		case c.err != nil:
			return nil, c.err
		case c.kind == frameTenant && len(s.rs.quotas) == 0:
			s.i = c.n
			h := *c.tenant
			return &h, nil
		case c.kind == frameQuota:
			// The quotas, after every space: read them and go on to the
			// end.
			s.i = c.n
			s.rs.quotas = append(s.rs.quotas, c.quotas...)
			continue
		case c.kind != frameEnd:
			return nil, fmt.Errorf("%s records where a tenant, the quotas or the end is due", frameName(c.kind))
		}
		return nil, nil
	}
}

// quotaRecord is one tenant's quota, as a snapshot stores it.
type quotaRecord struct {
	name  string
	quota Quota
}
