package fsm

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Versions 1 to 4 of the snapshot: JSON lines. A header line
// (snapshotHeader), then one line per lease (by id), per key (by key), per
// idempotency entry (by age), and, by version, per change-log entry (3) or
// per history version (4, by key). Version 4 is still written on request
// (WriteVersion), for a release that reads no later version.

// writeJSON writes version 4.
func (sn *Snapshot) writeJSON(w io.Writer) (int64, error) {
	if len(sn.tenants) > 0 || len(sn.quotas) > 0 {
		return 0, fmt.Errorf("%w: version 4 cannot hold tenants (%d) or their quotas (%d); write version 5", ErrBadSnapshot, len(sn.tenants), len(sn.quotas))
	}
	recs, live := sn.liveRecords()
	cw := &countingWriter{w: bufio.NewWriterSize(w, 1<<16)}
	enc := json.NewEncoder(cw)
	enc.SetEscapeHTML(false)
	err := enc.Encode(snapshotHeader{
		Format: SnapshotFormat, Version: 4,
		Revision: sn.revision, NextLeaseID: sn.nextLeaseID, Now: sn.now, Limits: sn.limits,
		Leases: sn.leases.Len(), Keys: len(recs),
		Idempotency: sn.idem.Len(), IdempotencySeq: sn.idemSeq,
		History: sn.hist.byKey.Len() + live, CompactRevision: sn.hist.floor,
	})
	sn.leases.Ascend(func(l *lease) bool {
		err = enc.Encode(snapshotLease{l.id, l.ttl, l.deadline, l.grantedRevision, l.anonymous, l.metadata})
		return err == nil
	})
	for _, r := range recs {
		if err != nil {
			break
		}
		err = enc.Encode(snapshotKVOf(r))
	}
	if err == nil {
		sn.idem.Ascend(func(e *idemEntry) bool {
			err = enc.Encode(snapshotIdem{Key: e.key, Hash: hex.EncodeToString(e.hash[:]), Revision: e.revision, Seq: e.seq, Reply: e.reply})
			return err == nil
		})
	}
	if err == nil {
		sn.ascendHistory(recs, live, func(v *version, ref int) bool {
			sv := snapshotVersion{Key: v.key(), Revision: v.rev, OpIndex: v.op, Cause: causeNames[v.cause], Now: v.now}
			switch {
			case v.isDelete():
				sv.Lease = v.rec.lease
			case ref >= 0 && recs[ref] == v.rec:
				sv.Live = true
			default:
				kv := snapshotKVOf(v.rec)
				sv.Record = &kv
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

// jsonSource reads versions 1 to 4. Unknown fields are refused, as they
// always were.
type jsonSource struct {
	dec *json.Decoder
}

func newJSONSource(r io.Reader) *jsonSource {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	return &jsonSource{dec: dec}
}

func (j *jsonSource) header() (snapshotHeader, error) {
	var h snapshotHeader
	if err := j.dec.Decode(&h); err != nil {
		return h, fmt.Errorf("%w: header: %v", ErrBadSnapshot, err)
	}
	// A JSON snapshot is version 4 at most: version 5 is binary.
	if h.Format != SnapshotFormat || h.Version < 1 || h.Version > 4 {
		return h, fmt.Errorf("%w: format %q version %d in JSON, this build reads %q versions 1 to 4 in JSON and up to %d in binary", ErrBadSnapshot, h.Format, h.Version, SnapshotFormat, SnapshotVersion)
	}
	return h, nil
}

// Each record is decoded into a zeroed value: Decode leaves fields absent
// from the line as they were.

func (j *jsonSource) lease(l *snapshotLease) error {
	*l = snapshotLease{}
	return j.dec.Decode(l)
}

func (j *jsonSource) key(k *snapshotKV) error {
	*k = snapshotKV{}
	return j.dec.Decode(k)
}

func (j *jsonSource) idem(e *snapshotIdem) error {
	*e = snapshotIdem{}
	if err := j.dec.Decode(e); err != nil {
		return err
	}
	hash, err := hex.DecodeString(e.Hash)
	e.hashOK = err == nil && len(hash) == len(e.hash)
	copy(e.hash[:], hash)
	return nil
}

func (j *jsonSource) change(c *snapshotChange) error {
	*c = snapshotChange{}
	return j.dec.Decode(c)
}

func (j *jsonSource) version(v *snapshotVersion) error {
	*v = snapshotVersion{}
	if err := j.dec.Decode(v); err != nil {
		return err
	}
	v.cause = causeOf(v.Cause)
	return nil
}

// nextSpace: versions 1 to 4 hold the default tenant's space alone.
func (j *jsonSource) nextSpace() (*snapshotHeader, error) {
	if _, err := j.dec.Token(); err != io.EOF {
		return nil, errors.New("data after the last record")
	}
	return nil, nil
}
