package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime"
	"sort"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// v5Magic is the first line of every version 5 snapshot.
const v5Magic = "concord.fsm v5\n"

// v5Frame is one frame of a version 5 snapshot: its kind, where it starts
// and ends in the file, and its payload.
type v5Frame struct {
	kind       byte
	start, end int
	payload    []byte
}

// v5FramesOf splits a version 5 snapshot into its frames, checking the
// layout the format promises: the magic line, then frames each closed by
// the CRC-32C of what precedes it in the frame, and nothing after them.
func v5FramesOf(t testing.TB, data []byte) []v5Frame {
	t.Helper()
	if !bytes.HasPrefix(data, []byte(v5Magic)) {
		t.Fatalf("no magic line: %.40q", data)
	}
	var frames []v5Frame
	for off := len(v5Magic); off < len(data); {
		n, k := binary.Uvarint(data[off+1:])
		if k <= 0 || off+1+k+int(n)+4 > len(data) {
			t.Fatalf("frame at %d: bad length", off)
		}
		end := off + 1 + k + int(n)
		if got, want := binary.LittleEndian.Uint32(data[end:]), crc32.Checksum(data[off:end], castagnoli); got != want {
			t.Fatalf("frame at %d: checksum %08x, want %08x", off, got, want)
		}
		frames = append(frames, v5Frame{kind: data[off], start: off, end: end + 4, payload: data[off+1+k : end]})
		off = end + 4
	}
	return frames
}

// frameKinds returns the kinds of a version 5 snapshot's frames, in order.
func frameKinds(t testing.TB, data []byte) string {
	t.Helper()
	var kinds []byte
	for _, f := range v5FramesOf(t, data) {
		kinds = append(kinds, f.kind)
	}
	return string(kinds)
}

// rawFrame makes a frame with a correct checksum.
func rawFrame(kind byte, payload []byte) []byte {
	p := binary.AppendUvarint([]byte{kind}, uint64(len(payload)))
	p = append(p, payload...)
	return binary.LittleEndian.AppendUint32(p, crc32.Checksum(p, castagnoli))
}

// v5Parts is a version 5 snapshot as its records: what the decoder gives,
// and what the encoder writes back, so that a test can break one rule at a
// time and still write a snapshot whose checksums are right. The header's
// counts are written as they are, not as the lists' lengths.
type v5Parts struct {
	h      snapshotHeader
	leases []snapshotLease
	keys   []snapshotKV
	idem   []snapshotIdem
	hist   []snapshotVersion
	// refs, when set, gives each version's reference into the keys
	// section (-1: its key in full) instead of the writer's choice.
	refs []int
}

// parseV5 decodes a version 5 snapshot into its records, with the decoder
// Restore uses, but without checking what they mean.
func parseV5(t testing.TB, data []byte) v5Parts {
	t.Helper()
	d := &binaryDecoder{r: bufio.NewReader(bytes.NewReader(data))}
	h, err := d.header()
	if err != nil {
		t.Fatal(err)
	}
	p := v5Parts{h: h}
	for {
		bb := &binaryBatch{}
		d.decodeFrame(bb)
		if bb.err != nil {
			t.Fatal(bb.err)
		}
		if bb.kind == frameEnd {
			break
		}
		p.leases = append(p.leases, bb.leases...)
		if bb.kind == frameKeys {
			p.keys = append(p.keys, bb.kvs...)
		}
		p.idem = append(p.idem, bb.idems...)
		for _, v := range bb.vers {
			if v.keyRef != 0 {
				v.Key = p.keys[v.keyRef-1].Key
				v.keyRef = 0
			}
			if v.Record != nil {
				rec := *v.Record
				rec.Key = v.Key
				v.Record = &rec
			}
			p.hist = append(p.hist, v)
		}
	}
	return p
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// clone copies the lists, and the records of the versions, so that a
// change to the copy leaves p alone.
func (p v5Parts) clone() v5Parts {
	c := p
	c.leases = append([]snapshotLease(nil), p.leases...)
	c.keys = append([]snapshotKV(nil), p.keys...)
	c.idem = append([]snapshotIdem(nil), p.idem...)
	c.hist = append([]snapshotVersion(nil), p.hist...)
	for i := range c.hist {
		if r := c.hist[i].Record; r != nil {
			rec := *r
			c.hist[i].Record = &rec
		}
	}
	c.refs = append([]int(nil), p.refs...)
	return c
}

// counted sets the header's counts to the lists' lengths.
func (p v5Parts) counted() v5Parts {
	p.h.Leases, p.h.Keys, p.h.Idempotency, p.h.History = len(p.leases), len(p.keys), len(p.idem), len(p.hist)
	return p
}

// encode writes the records with the encoder WriteTo uses. A version's
// key goes by reference when it is in the keys section and the reference
// does not go back, as WriteTo does.
func (p v5Parts) encode() []byte {
	var buf bytes.Buffer
	e := newBinaryEncoder(&buf)
	e.header(&p.h)
	e.start(frameLeases)
	for i := range p.leases {
		e.lease(&p.leases[i])
	}
	e.endSection()
	e.start(frameKeys)
	for i := range p.keys {
		e.kv(&p.keys[i])
	}
	e.endSection()
	e.start(frameIdem)
	for i := range p.idem {
		e.idem(&p.idem[i])
	}
	e.endSection()
	e.start(frameHistory)
	for i := range p.hist {
		v := &p.hist[i]
		ref := sort.Search(len(p.keys), func(j int) bool { return p.keys[j].Key >= v.Key })
		if ref == len(p.keys) || p.keys[ref].Key != v.Key || ref < e.ref {
			ref = -1
		}
		if p.refs != nil {
			ref = p.refs[i]
		}
		e.version(v, ref)
	}
	e.endSection()
	if _, err := e.finish(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// The v5 golden file's layout: the magic line, the header, one frame per
// section (the sections are small), the end; its header says what the v4
// golden's says; and its records, decoded and written again by the
// encoder, are the same bytes (so the tests below, which break v5 files
// through the encoder, break nothing else).
func TestSnapshotLayoutV5(t *testing.T) {
	data := readGoldenFile(t, goldenV5)
	eq(t, "frames", frameKinds(t, data), "HLKIVE")
	p := parseV5(t, data)
	eq(t, "header", p.h, snapshotHeader{Format: SnapshotFormat, Version: 5, Revision: 15, NextLeaseID: 11, Now: t0 + 5_700,
		Limits: Limits{MaxLeases: 1000, MaxKeysPerLease: 100, IdempotencyEntries: 100_000, IdempotencyRevisions: 10_000, HistoryRevisions: 4, HistoryAgeMS: 4_000},
		Leases: 2, Keys: 4, Idempotency: 3, IdempotencySeq: 3, CompactRevision: 11, History: 9})
	var keys []string
	for _, k := range p.keys {
		keys = append(keys, k.Key)
	}
	eq(t, "keys", keys, []string{"cfg.a", "svc.db", "tmp.x", "v3.a"})
	var hist []string
	for _, v := range p.hist {
		hist = append(hist, fmt.Sprintf("%s@%d.%d %s live=%v record=%v", v.Key, v.Revision, v.OpIndex, causeNames[v.cause], v.Live, v.Record != nil))
	}
	eq(t, "history", hist, []string{
		"idem.a@11.0 put live=false record=true", "idem.a@15.0 delete live=false record=false",
		"idem.b@12.0 put live=false record=true", "idem.b@15.1 delete live=false record=false",
		"svc.api.n1@1.0 put live=false record=true", "svc.api.n1@14.0 lease_revoked live=false record=false",
		"svc.api.n2@2.0 put live=false record=true", "svc.api.n2@14.1 lease_revoked live=false record=false",
		"v3.a@13.0 put live=true record=false",
	})
	eq(t, "written again", string(p.encode()), string(data))
	if v4 := readGoldenFile(t, goldenV4); len(data) >= len(v4)/2 {
		t.Errorf("v5 golden is %d bytes, v4 %d: not the saving binary promises", len(data), len(v4))
	}
}

// A key written once costs, besides its key record, a few bytes of history:
// the live version names the key by reference and states revision, op index
// and time as small differences.
func TestSnapshotV5LiveVersionIsSmall(t *testing.T) {
	s := New()
	for i := 0; i < 1000; i++ {
		mustApply(t, s, t0+int64(i), &Put{Key: fmt.Sprintf("scale.0.%08d", i), Value: val(`"` + strings.Repeat("v", 98) + `"`)})
	}
	var hist int
	for _, f := range v5FramesOf(t, snap(t, s)) {
		if f.kind == frameHistory {
			hist += len(f.payload)
		}
	}
	if per := float64(hist) / 1000; per > 5 {
		t.Fatalf("the history costs %.1f bytes per key written once, want at most 5", per)
	}
}

// Snapshots of many generated states restore and write back to the same
// bytes; the same state written in version 4 restores to the same state
// (both readers agree); and between them the states hold every kind of
// record the format has.
func TestSnapshotV5RoundTrip(t *testing.T) {
	var seen struct{ contentType, metadata, leaseMeta, tombstones, bases, idem, anonymous int }
	for seed := int64(1); seed <= 3; seed++ {
		log, _ := genLog(seed, 3000)
		s := New()
		for i, e := range log {
			s.Apply(e)
			if (i+1)%500 != 0 {
				continue
			}
			data := snap(t, s)
			r := restored(t, data)
			if again := snap(t, r); !bytes.Equal(again, data) {
				t.Fatalf("seed %d entry %d: snapshot -> restore -> snapshot differs", seed, i)
			}
			eq(t, "digest", stateDigest(r), stateDigest(s))
			eq(t, "log", loggedEvents(r), loggedEvents(s))
			if err := checkInvariants(r); err != nil {
				t.Fatalf("seed %d entry %d: %v", seed, i, err)
			}
			var v4 bytes.Buffer
			if _, err := s.Snapshot().WriteVersion(&v4, 4); err != nil {
				t.Fatal(err)
			}
			if got := snap(t, restored(t, v4.Bytes())); !bytes.Equal(got, data) {
				t.Fatalf("seed %d entry %d: the state restored from version 4 writes other bytes than from version 5", seed, i)
			}
			s.kv.Ascend(func(r *record) bool {
				seen.contentType += btoi(r.contentType() != "")
				seen.metadata += btoi(len(r.metadata()) > 0)
				return true
			})
			s.leases.Ascend(func(l *lease) bool {
				seen.leaseMeta += btoi(len(l.metadata) > 0)
				seen.anonymous += btoi(l.anonymous)
				return true
			})
			s.hist.byKey.Ascend(func(v *version) bool {
				seen.tombstones += btoi(v.isDelete())
				seen.bases += btoi(v.rev <= s.hist.floor)
				return true
			})
			seen.idem += s.IdempotencyCount()
		}
	}
	if seen.contentType == 0 || seen.metadata == 0 || seen.leaseMeta == 0 || seen.tombstones == 0 || seen.bases == 0 || seen.idem == 0 || seen.anonymous == 0 {
		t.Fatalf("the states lacked some kind of record: %+v", seen)
	}
}

// A state with one of everything, built by hand: content type and
// metadata, a key put again (so its old record is in the history), a
// tombstone, a base at the floor, an idempotency entry, an anonymous
// lease, a lease with metadata. It round-trips, and its history reads the
// same after the restore.
func TestSnapshotV5RoundTripByHand(t *testing.T) {
	s := New()
	run(t, s,
		step{t0, &Limits{MaxLeases: 100, MaxKeysPerLease: 100, HistoryRevisions: 5}},
		step{t0, &Grant{TTL: 30, Metadata: val(`{"owner":"a"}`)}},
		step{t0 + 1, &Put{Key: "base.k", Value: val(`1`)}},                                                                                   // rev 1: the base below
		step{t0 + 2, &Put{Key: "ct.k", Value: val(`"x"`), ContentType: "text/plain", Metadata: val(`{"m":1}`), Lease: 1}},                    // rev 2
		step{t0 + 3, &Put{Key: "anon.k", Value: val(`{"a":[1,2]}`), TTL: 10}},                                                                // rev 3
		step{t0 + 4, &Put{Key: "gone.k", Value: val(`true`)}},                                                                                // rev 4
		step{t0 + 5, &Put{Key: "filler.1", Value: val(`0`)}},                                                                                 // rev 5
		step{t0 + 6, &Put{Key: "filler.2", Value: val(`0`)}},                                                                                 // rev 6: the floor rises to 1
		step{t0 + 7, Command{Op: OpPut, IdempotencyKey: "c:1", Body: &Put{Key: "base.k", Value: val(`2`), ContentType: "application/json"}}}, // rev 7
		step{t0 + 8, &Delete{Key: "gone.k"}},                                                                                                 // rev 8
		step{t0 + 9, &Put{Key: "ct.k", Value: val(`"y"`), Lease: 1}},                                                                         // rev 9
	)
	if s.CompactRevision() == 0 || s.hist.latest("base.k", s.CompactRevision()) == nil {
		t.Fatalf("floor %d: the state has no base", s.CompactRevision())
	}
	data := snap(t, s)
	r := restored(t, data)
	eq(t, "written again", string(snap(t, r)), string(data))
	eq(t, "digest", stateDigest(r), stateDigest(s))
	for _, k := range []string{"base.k", "ct.k", "anon.k", "gone.k"} {
		want, err := s.History(HistoryQuery{Key: k, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.History(HistoryQuery{Key: k, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		eq(t, k+" history", got, want)
	}
	for rev := s.CompactRevision(); rev <= s.Revision(); rev++ {
		q := GetQuery{IsPrefix: true, Limit: 100}
		got, err := r.GetAt(q, rev, t0+10)
		if err != nil {
			t.Fatal(err)
		}
		want, err := s.GetAt(q, rev, t0+10)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, fmt.Sprintf("keys at %d", rev), got, want)
	}
	retry := Command{Op: OpPut, Now: t0 + 20, IdempotencyKey: "c:1", Body: &Put{Key: "base.k", Value: val(`2`), ContentType: "application/json"}}
	if res := r.ApplyCommand(retry); !res.Cached {
		t.Fatalf("the idempotency entry did not survive: %+v", res)
	}
	p := parseV5(t, data)
	var withCT, withMeta, tomb, anon bool
	for _, k := range p.keys {
		withCT = withCT || k.ContentType != ""
		withMeta = withMeta || len(k.Metadata) > 0
	}
	for _, v := range p.hist {
		tomb = tomb || v.cause == causeDelete
		if r := v.Record; r != nil {
			withCT = withCT || r.ContentType != ""
			withMeta = withMeta || len(r.Metadata) > 0
		}
	}
	for _, l := range p.leases {
		anon = anon || l.Anonymous
	}
	if !withCT || !withMeta || !tomb || !anon || len(p.idem) != 1 {
		t.Fatalf("the snapshot lacks what the state holds: content type %v, metadata %v, tombstone %v, anonymous lease %v, %d idempotency entries",
			withCT, withMeta, tomb, anon, len(p.idem))
	}
}

// v5Minimal is the smallest snapshot with a key: magic, header (revision
// 1, one key, its live version), key "k" = 1 put at revision 1, its live
// version, end. keyRecord and version can be replaced to break one field.
func v5Minimal(keyRecord, version []byte) []byte {
	var h bytes.Buffer
	e := newBinaryEncoder(&h)
	e.header(&snapshotHeader{Revision: 1, NextLeaseID: 1, Now: t0, Limits: DefaultLimits, Keys: 1, History: 1})
	out := h.Bytes()
	out = append(out, rawFrame(frameKeys, keyRecord)...)
	out = append(out, rawFrame(frameHistory, version)...)
	return append(out, rawFrame(frameEnd, nil)...)
}

// v5Key is the record of key "k" = 1, created and modified at revision 1,
// version 1, with flags and the optional fields given.
func v5Key(flags byte, optional ...byte) []byte {
	p := appendKey([]byte{flags}, "", "k")
	p = appendBytes(p, []byte("1"))
	p = binary.AppendVarint(p, 1)
	p = binary.AppendVarint(p, 0)
	p = binary.AppendVarint(p, 1)
	return append(p, optional...)
}

// v5LiveVersion is the live version of the first key at revision 1.
func v5LiveVersion() []byte {
	p := []byte{causePut | flagLive | flagRef, 0}
	p = binary.AppendVarint(p, 1)
	return binary.AppendVarint(p, t0)
}

func TestSnapshotV5Minimal(t *testing.T) {
	s := restored(t, v5Minimal(v5Key(0), v5LiveVersion()))
	eq(t, "key", getKey(t, s, "k").Value, val(`1`))
	eq(t, "the writer writes it so", string(snap(t, s)), string(v5Minimal(v5Key(0), v5LiveVersion())))
}

// badV5Snapshots are broken version 5 snapshots, for
// TestRestoreRejectsBadSnapshots: every truncation and a flipped bit or
// byte anywhere (caught by the checksums), counts that lie, frames out of
// place, fields the encoding forbids, and each rule Restore checks broken
// once, written with correct checksums so that the rule and not the
// checksum refuses them. (A record of another key than its version's, a
// rule of version 4, cannot be written: a version's record has no key of
// its own.)
func badV5Snapshots(t testing.TB) []badSnapshot {
	golden := readGoldenFile(t, goldenV5)
	frames := v5FramesOf(t, golden)
	base := parseV5(t, golden)
	if len(base.hist) != 9 || base.hist[8].Key != "v3.a" || !base.hist[8].Live || len(base.leases) != 2 || len(base.keys) != 4 {
		t.Fatalf("unexpected v5 golden layout: %+v", base)
	}
	var cases []badSnapshot
	add := func(name string, data []byte) { cases = append(cases, badSnapshot{"v5: " + name, data}) }

	// The encoding: every truncation, every byte flipped, and one bit.
	for n := 0; n < len(golden); n++ {
		add(fmt.Sprintf("truncated to %d bytes", n), golden[:n])
	}
	for i := range golden {
		for _, x := range []byte{0x01, 0xff} {
			data := bytes.Clone(golden)
			data[i] ^= x
			add(fmt.Sprintf("byte %d xor %#x", i, x), data)
		}
	}
	// Frames out of place, missing, doubled, or extra.
	frame := func(i int) []byte { return golden[frames[i].start:frames[i].end] }
	join := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	magic := []byte(v5Magic)
	add("keys before leases", join(magic, frame(0), frame(2), frame(1), frame(3), frame(4), frame(5)))
	add("no end frame", join(magic, frame(0), frame(1), frame(2), frame(3), frame(4)))
	add("two end frames", join(golden, frame(5)))
	add("no header frame", join(magic, frame(1), frame(2), frame(3), frame(4), frame(5)))
	add("two header frames", join(magic, frame(0), frame(0), frame(1), frame(2), frame(3), frame(4), frame(5)))
	add("a keys frame twice", join(magic, frame(0), frame(1), frame(2), frame(2), frame(3), frame(4), frame(5)))
	add("an empty leases frame", join(magic, frame(0), rawFrame(frameLeases, nil), frame(1), frame(2), frame(3), frame(4), frame(5)))
	add("a frame of unknown kind", join(magic, frame(0), rawFrame('X', []byte{1}), frame(1), frame(2), frame(3), frame(4), frame(5)))
	add("an end frame that is not empty", join(magic, frame(0), frame(1), frame(2), frame(3), frame(4), rawFrame(frameEnd, []byte{0})))
	add("data after the end", join(golden, []byte{0}))
	add("a frame after the end", join(golden, frame(1)))
	add("a frame longer than any", join(magic, frame(0), []byte{frameLeases}, binary.AppendUvarint(nil, maxFrame+1)))
	add("a frame whose length says more than follows", join(magic, frame(0), []byte{frameLeases}, binary.AppendUvarint(nil, 1<<29), []byte("short")))
	add("a length written in more bytes than it needs", join(magic, frame(0), func() []byte {
		f := []byte{frameLeases, byte(len(frames[1].payload)) | 0x80, 0}
		f = append(f, frames[1].payload...)
		return binary.LittleEndian.AppendUint32(f, crc32.Checksum(f, castagnoli))
	}(), frame(2), frame(3), frame(4), frame(5)))
	// The magic line.
	for _, m := range []string{"concord.fsm v4\n", "concord.fsm v6\n", "concord.fsm v05\n", "concord.fsm v5 \n", "concord.fsm v5", "concord.fsm v\n", "concord.kv v5\n",
		"concord.fsm v555555555555555555555\n"} {
		add(fmt.Sprintf("magic %q", m), join([]byte(m), golden[len(v5Magic):]))
	}

	// Counts that lie, each way, checksums right.
	mut := func(name string, f func(p *v5Parts)) {
		p := base.clone()
		f(&p)
		add(name, p.encode())
	}
	for _, c := range []struct {
		name string
		n    func(p *v5Parts) *int
	}{
		{"leases", func(p *v5Parts) *int { return &p.h.Leases }},
		{"keys", func(p *v5Parts) *int { return &p.h.Keys }},
		{"idempotency entries", func(p *v5Parts) *int { return &p.h.Idempotency }},
		{"history versions", func(p *v5Parts) *int { return &p.h.History }},
	} {
		mut("one more of the "+c.name+" announced", func(p *v5Parts) { *c.n(p)++ })
		mut("one fewer of the "+c.name+" announced", func(p *v5Parts) { *c.n(p)-- })
		mut("a count of the "+c.name+" past any", func(p *v5Parts) { *c.n(p) = maxCount + 1 })
	}
	add("a header field more", join(magic, rawFrame(frameHeader, append(bytes.Clone(frames[0].payload), 0)), golden[frames[1].start:]))

	// Leases, keys, idempotency entries.
	mutC := func(name string, f func(p *v5Parts)) {
		mut(name, func(p *v5Parts) { f(p); *p = p.counted() })
	}
	mutC("lease id 0", func(p *v5Parts) { p.leases[0].ID = 0 })
	mutC("lease ttl 0", func(p *v5Parts) { p.leases[0].TTL = 0 })
	mutC("a lease twice", func(p *v5Parts) { p.leases = append(p.leases[:1], p.leases...) })
	mutC("leases out of order", func(p *v5Parts) { p.leases[0], p.leases[1] = p.leases[1], p.leases[0] })
	mutC("a key names a missing lease", func(p *v5Parts) { p.keys[1].Lease = 8 })
	mutC("an anonymous lease with two keys", func(p *v5Parts) { p.keys[0].Lease = 9 })
	// Only a space being imported may hold an anonymous lease whose key
	// has not come yet.
	mutC("an anonymous lease without its key", func(p *v5Parts) {
		for i := range p.keys {
			if p.keys[i].Lease == 9 {
				p.keys[i].Lease = 0
			}
		}
	})
	mutC("a key twice", func(p *v5Parts) { p.keys = append(p.keys[:1], p.keys...) })
	mutC("keys out of order", func(p *v5Parts) { p.keys[0], p.keys[1] = p.keys[1], p.keys[0] })
	mutC("a key without a value", func(p *v5Parts) { p.keys[0].Value = nil })
	mutC("an empty key", func(p *v5Parts) { p.keys[0].Key = "" })
	mutC("an idempotency entry of sequence 0", func(p *v5Parts) { p.idem[0].Seq = 0 })
	mutC("an idempotency entry past the sequence", func(p *v5Parts) { p.idem[2].Seq = 4 })
	mutC("an idempotency entry without a key", func(p *v5Parts) { p.idem[0].Key = "" })
	mutC("an idempotency entry without a reply", func(p *v5Parts) { p.idem[0].Reply = nil })
	mutC("an idempotency key twice", func(p *v5Parts) { p.idem[1].Key = p.idem[0].Key })
	mutC("an idempotency sequence twice", func(p *v5Parts) { p.idem[1].Seq = p.idem[0].Seq })

	// Each rule of the history, as badV4Snapshots breaks it in version 4.
	// Lines: 0 idem.a@11 1 idem.a@15(del) 2 idem.b@12 3 idem.b@15(del)
	// 4 svc.api.n1@1(base) 5 svc.api.n1@14(del) 6 svc.api.n2@2(base)
	// 7 svc.api.n2@14(del) 8 v3.a@13(live); the floor is 11.
	keep := func(idx ...int) func(p *v5Parts) {
		return func(p *v5Parts) {
			var h []snapshotVersion
			for _, i := range idx {
				h = append(h, p.hist[i])
			}
			p.hist = h
		}
	}
	w := func(rev int64, cause uint8, rec *snapshotKV) snapshotVersion {
		return snapshotVersion{Key: "w", Revision: rev, cause: cause, Now: t0 + 5_000, Record: rec}
	}
	mutC("a base dropped (a delete with nothing before it)", keep(0, 1, 2, 3, 5, 6, 7, 8))
	mutC("a change dropped (its base left without a later version)", keep(0, 1, 2, 3, 4, 6, 7, 8))
	mutC("the live version dropped", keep(0, 1, 2, 3, 4, 5, 6, 7))
	mutC("the last revision's changes dropped", keep(0, 2, 4, 5, 6, 7, 8))
	mutC("two versions swapped", keep(1, 0, 2, 3, 4, 5, 6, 7, 8))
	mutC("a version twice", keep(0, 0, 1, 2, 3, 4, 5, 6, 7, 8))
	mutC("a tombstone at the floor", func(p *v5Parts) { p.hist = append(p.hist, w(10, causeDelete, nil)) })
	mutC("a version at the floor with no later change", func(p *v5Parts) {
		p.hist = append(p.hist, w(3, causePut, &snapshotKV{Key: "w", Value: val(`1`), CreateRevision: 3, ModRevision: 3, Version: 1}))
	})
	mutC("live but not the live record", func(p *v5Parts) { p.hist[2].Live, p.hist[2].Record = true, nil })
	mutC("live and with a record", func(p *v5Parts) { p.hist[2].Live = true })
	mutC("a put without a record", func(p *v5Parts) { p.hist[2].Record = nil })
	mutC("a delete with a record", func(p *v5Parts) {
		p.hist[1].Record = &snapshotKV{Key: "idem.a", Value: val(`1`), CreateRevision: 15, ModRevision: 15, Version: 1}
	})
	mutC("a record of another revision", func(p *v5Parts) { p.hist[2].Record.ModRevision = 13 })
	mutC("a record without a value", func(p *v5Parts) { p.hist[2].Record.Value = nil })
	mutC("a tombstone naming another lease than its record's", func(p *v5Parts) { p.hist[5].Lease = 2 })
	mutC("a tombstone naming a lease its record had not", func(p *v5Parts) { p.hist[1].Lease = 1 })
	for _, c := range []uint8{0, causeTxn + 1, 7} {
		mutC(fmt.Sprintf("cause %d", c), func(p *v5Parts) { p.hist[1].cause = c })
	}
	mutC("a time after the state's clock", func(p *v5Parts) { p.hist[1].Now = t0 + 5_701 })
	mutC("times going back", func(p *v5Parts) { p.hist[8].Now = t0 + 5_100 })
	mutC("an op index gap", func(p *v5Parts) { p.hist[3].OpIndex = 2 })
	mutC("op index 0 twice", func(p *v5Parts) { p.hist[3].OpIndex = 0 })
	mutC("the floor above the revision", func(p *v5Parts) { p.h.CompactRevision = 16 })
	mutC("a negative floor", func(p *v5Parts) { p.h.CompactRevision = -1 })
	mutC("a version at revision 0", func(p *v5Parts) {
		p.hist[4].Revision, p.hist[4].Record.CreateRevision, p.hist[4].Record.ModRevision = 0, 0, 0
	})
	mutC("a version after the state's revision", func(p *v5Parts) { p.hist[1].Revision = 16 })
	mutC("a version with an empty key", func(p *v5Parts) { p.hist[0].Key, p.hist[1].Key = "", "" })
	mutC("a later version of a key with none before", func(p *v5Parts) { p.hist[2].Record.Version = 2 })
	mutC("two versions of a key at the floor", func(p *v5Parts) {
		b := p.hist[4]
		b.Revision = 3
		rec := *b.Record
		rec.ModRevision, rec.CreateRevision = 3, 3
		b.Record = &rec
		p.hist = append(p.hist[:5], append([]snapshotVersion{b}, p.hist[5:]...)...)
	})
	mutC("a live key changed above the floor with no history", func(p *v5Parts) { p.keys[0].ModRevision = 12 })
	mutC("a live key whose history ends with its delete", func(p *v5Parts) {
		k := snapshotKV{Key: "idem.a", Value: val(`1`), CreateRevision: 5, ModRevision: 5, Version: 1}
		p.keys = append(p.keys[:1], append([]snapshotKV{k}, p.keys[1:]...)...)
	})
	mutC("a version after its key's live one", func(p *v5Parts) {
		again := p.hist[8]
		again.OpIndex = 1
		p.hist = append(p.hist, again)
	})
	mutC("a key's newest put a copy of its live record, not the record", func(p *v5Parts) {
		rec := p.keys[3]
		p.hist[8].Live, p.hist[8].Record = false, &rec
	})
	mutC("a reference past the keys", func(p *v5Parts) {
		p.refs = []int{-1, -1, -1, -1, -1, -1, -1, -1, 4}
	})
	mutC("a reference going back", func(p *v5Parts) {
		// v3.a by reference, then idem.a (in full) and a second reference
		// to cfg.a, behind it.
		p.hist = append(p.hist, snapshotVersion{Key: "zz", Revision: 15, cause: causePut})
		p.refs = []int{-1, -1, -1, -1, -1, -1, -1, -1, 3, 0}
	})

	// Fields the encoding forbids, in the smallest snapshot.
	live := v5LiveVersion()
	add("unknown key flags", v5Minimal(v5Key(8), live))
	add("a lease marked present but 0", v5Minimal(v5Key(flagLease, 0), live))
	add("a content type marked present but empty", v5Minimal(v5Key(flagContentType, 0), live))
	add("metadata marked present but empty", v5Minimal(v5Key(flagMetadata, 0), live))
	add("a key record cut short", v5Minimal(v5Key(0)[:5], live))
	add("a key sharing more than the previous key has", v5Minimal(append([]byte{0, 3}, v5Key(0)[2:]...), live))
	add("a key record with a byte more", v5Minimal(v5Key(0, 0), live))
	add("a version with op index 0 stated", v5Minimal(v5Key(0), append([]byte{live[0] | flagOp}, append(live[1:], 0)...)))
	add("a version with an op index past int32", v5Minimal(v5Key(0), append([]byte{live[0] | flagOp}, binary.AppendUvarint(live[1:], 1<<31)...)))
	add("a tombstone's lease marked present but 0", v5Minimal(v5Key(0), append([]byte{live[0] | flagDelete}, append(live[1:], 0)...)))
	add("a version's record with unknown flags", v5Minimal(v5Key(0), append([]byte{live[0]&^flagLive | flagRecord}, append(live[1:], 0x40, 1, '1', 0, 0, 2)...)))
	add("unknown lease flags", func() []byte {
		var h bytes.Buffer
		e := newBinaryEncoder(&h)
		e.header(&snapshotHeader{Revision: 0, NextLeaseID: 2, Now: t0, Limits: DefaultLimits, Leases: 1})
		lease := []byte{4, 1, 2, 0, 0}
		return join(h.Bytes(), rawFrame(frameLeases, lease), rawFrame(frameEnd, nil))
	}())
	return cases
}

// Damaged input costs what it is, not what it claims: a frame that says it
// holds a gigabyte, a header that announces 2^40 keys, a value that says it
// is 2^60 bytes long. Each is refused having allocated little.
func TestRestoreV5AllocatesByWhatArrives(t *testing.T) {
	golden := readGoldenFile(t, goldenV5)
	frames := v5FramesOf(t, golden)
	hdr := golden[:frames[0].end]
	bigHeader := func() []byte {
		var h bytes.Buffer
		e := newBinaryEncoder(&h)
		e.header(&snapshotHeader{Revision: 1 << 40, NextLeaseID: 1, Now: t0, Limits: DefaultLimits, Leases: maxCount, Keys: maxCount, Idempotency: maxCount, History: maxCount})
		return h.Bytes()
	}
	bigValue := append(appendKey([]byte{0}, "", "k"), binary.AppendUvarint(nil, 1<<60)...)
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"a frame of a gigabyte", append(append(bytes.Clone(hdr), frameLeases), binary.AppendUvarint(nil, maxFrame)...)},
		{"counts of 2^40", append(bigHeader(), rawFrame(frameEnd, nil)...)},
		{"counts of 2^40 and a key", append(bigHeader(), append(rawFrame(frameLeases, nil), rawFrame(frameKeys, v5Key(0))...)...)},
		{"a value of 2^60 bytes", v5Minimal(bigValue, v5LiveVersion())},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		err := New().Restore(bytes.NewReader(c.data))
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 4<<20 {
			t.Errorf("%s: %d bytes allocated to refuse %d bytes of input", c.name, n, len(c.data))
		}
	}
}

// FuzzRestoreV5 feeds the version 5 reader damaged snapshots: it must
// refuse them with ErrBadSnapshot, never panic or allocate beyond reason,
// and a snapshot it accepts is a state whose invariants hold and which
// writes and restores to itself.
func FuzzRestoreV5(f *testing.F) {
	f.Add(readGoldenFile(f, goldenV5))
	f.Add(snap(f, New()))
	f.Add(v5Minimal(v5Key(0), v5LiveVersion()))
	for i, c := range badV5Snapshots(f) {
		if i%97 == 0 {
			f.Add(c.data)
		}
	}
	_, s := genLog(5, 400)
	f.Add(snap(f, s))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New()
		if err := s.Restore(bytes.NewReader(data)); err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("Restore = %v, not an ErrBadSnapshot", err)
			}
			return
		}
		if err := checkInvariants(s); err != nil {
			t.Fatalf("accepted a snapshot that breaks the invariants: %v", err)
		}
		again := snap(t, s)
		if got := snap(t, restored(t, again)); !bytes.Equal(got, again) {
			t.Fatal("an accepted snapshot does not write and restore to itself")
		}
	})
}

// Restore reads a v5 snapshot whole and checks it before it replaces the
// state, including when the reader fails part-way (TestRestoreReadError
// covers every version); and the decoder goroutine is gone when Restore
// returns, whether it succeeded or not.
func TestRestoreV5LeavesNoGoroutine(t *testing.T) {
	golden := readGoldenFile(t, goldenV5)
	before := runtime.NumGoroutine()
	for n := 0; n <= len(golden); n += 7 {
		_ = New().Restore(bytes.NewReader(golden[:n]))
	}
	_ = New().Restore(io.MultiReader(bytes.NewReader(golden[:len(golden)/2]), iotest.ErrReader(errors.New("disk on fire"))))
	if err := New().Restore(bytes.NewReader(golden)); err != nil {
		t.Fatal(err)
	}
	// A goroutine that has said it is done may take a moment to end.
	checkGoroutines := func() error {
		if after := runtime.NumGoroutine(); after > before {
			return fmt.Errorf("%d goroutines before, %d after", before, after)
		}
		return nil
	}
	for i := 0; i < 100 && checkGoroutines() != nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if err := checkGoroutines(); err != nil {
		t.Fatal(err)
	}
}

// Every error a v5 reader gives is an ErrBadSnapshot that names what is
// wrong, as a version 4 one does.
func TestRestoreV5ErrorsSayWhat(t *testing.T) {
	golden := readGoldenFile(t, goldenV5)
	flipped := bytes.Clone(golden)
	flipped[len(golden)/2] ^= 1
	for _, c := range []struct {
		data []byte
		want string
	}{
		{flipped, "does not match: the snapshot is damaged"},
		{golden[:len(golden)-3], "truncated"},
		{append(bytes.Clone(golden), 0), "data after the end frame"},
		{append([]byte("concord.fsm v6\n"), golden[len(v5Magic):]...), "version 6"},
	} {
		err := New().Restore(bytes.NewReader(c.data))
		if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Restore = %v, want ErrBadSnapshot saying %q", err, c.want)
		}
	}
}

// A history whose key index holds more items than the restorer hands its
// tree builder at once (buildChunk) restores to the same state, with the
// items built concurrently chunk by chunk and built in one go: every key
// has a version at the floor, and some a run of several.
func TestRestoreV5KeyIndexInChunks(t *testing.T) {
	keys := 2*buildChunk + 100
	s := New()
	mustApply(t, s, t0, &Limits{MaxLeases: 1 << 20, MaxKeysPerLease: 1 << 20, HistoryRevisions: int64(keys)})
	for w := range 3 {
		for i := range keys {
			if w == 2 && i%3 != 0 {
				continue // a third of the keys get a run of versions
			}
			mustApply(t, s, t0+int64(w), &Put{Key: fmt.Sprintf("k.%06d", i), Value: val(fmt.Sprintf(`"%d"`, w))})
		}
	}
	if n := s.hist.byKey.runs.Len(); n <= buildChunk {
		t.Fatalf("the key index holds %d items; the test needs more than %d", n, buildChunk)
	}
	want := snap(t, s)
	for _, concurrent := range []bool{true, false} {
		restoreConcurrently = concurrent
		r := restored(t, want)
		restoreConcurrently = true
		if err := checkInvariants(r); err != nil {
			t.Fatalf("concurrent %v: %v", concurrent, err)
		}
		if got := snap(t, r); !bytes.Equal(got, want) {
			t.Fatalf("concurrent %v: the restored state writes a different snapshot", concurrent)
		}
		if r.hist.byKey.Len() != s.hist.byKey.Len() || r.hist.byKey.runs.Len() != s.hist.byKey.runs.Len() {
			t.Fatalf("concurrent %v: key index of %d versions in %d items, want %d in %d", concurrent,
				r.hist.byKey.Len(), r.hist.byKey.runs.Len(), s.hist.byKey.Len(), s.hist.byKey.runs.Len())
		}
	}
}
