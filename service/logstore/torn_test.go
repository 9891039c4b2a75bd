package logstore

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// Segment format (raft-wal segment/format.go): a 32-byte file header, then
// frames of an 8-byte header (type, 3 reserved bytes, length or CRC) and a
// payload padded to 8 bytes. An append batch is its entry frames and then a
// commit frame holding the CRC of everything since the previous commit.
const (
	segHeaderLen   = 32
	frameHeaderLen = 8
	frameEntry     = 1
	frameIndex     = 2
	frameCommit    = 3
)

// batchEnds walks a segment file and returns the file offset at which each
// committed batch ends (just after its commit frame).
func batchEnds(t *testing.T, b []byte) []int {
	t.Helper()
	var ends []int
	off := segHeaderLen
	for off+frameHeaderLen <= len(b) {
		typ := b[off]
		n := int(binary.LittleEndian.Uint32(b[off+4 : off+8]))
		switch typ {
		case 0:
			return ends
		case frameCommit:
			off += frameHeaderLen
			ends = append(ends, off)
		case frameEntry, frameIndex:
			off += frameHeaderLen + (n+7)/8*8
		default:
			t.Fatalf("frame type %d at %d", typ, off)
		}
	}
	return ends
}

// tailSegment returns the path of the WAL's last segment file.
func tailSegment(t *testing.T, dataDir string) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dataDir, DirName, "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segment files: %v", err)
	}
	sort.Strings(segs) // names start with the zero-padded base index
	return segs[len(segs)-1]
}

// A crash that tears the last append batch (the file cut mid-record, the
// unwritten rest reading as zeros, or a sector of it lost under a commit
// frame that made it) costs exactly that batch: every batch before it is
// there, the store opens, and appends go on from there. StoreLogs returns
// only after the batch's fsync, and Raft acknowledges an entry only after
// StoreLogs returned, so a batch a crash can tear was never acknowledged.
func TestTornTailLosesOnlyTheLastBatch(t *testing.T) {
	// Batches 1-100, 101-150, 151-151, 152-200.
	batches := [][2]uint64{{1, 100}, {101, 150}, {151, 151}, {152, 200}}
	tears := map[string]func(t *testing.T, f *os.File, start, end int){
		// Inside the commit frame: the batch has no valid commit.
		"cut in the commit frame": func(t *testing.T, f *os.File, start, end int) {
			truncate(t, f, end-3)
		},
		// Mid-record: half the batch's entries made it.
		"cut mid-batch": func(t *testing.T, f *os.File, start, end int) {
			truncate(t, f, start+(end-start)/2+3)
		},
		// Preallocated space the crash never wrote reads as zeros.
		"zeros from mid-batch": func(t *testing.T, f *os.File, start, end int) {
			zero(t, f, start+(end-start)/2, end)
		},
		// The commit frame reached the disk but a sector before it did not:
		// its CRC no longer matches.
		"lost sector under the commit": func(t *testing.T, f *os.File, start, end int) {
			zero(t, f, start+frameHeaderLen, start+frameHeaderLen+8)
		},
	}
	for name, tear := range tears {
		for tornBatch := range batches {
			t.Run(name+"/"+string(rune('0'+tornBatch)), func(t *testing.T) {
				s, dir := openTemp(t)
				for _, b := range batches[:tornBatch+1] {
					if err := s.StoreLogs(makeLogs(b[0], b[1])); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				path := tailSegment(t, dir)
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				ends := batchEnds(t, data)
				if len(ends) != tornBatch+1 {
					t.Fatalf("%d batches in the segment, want %d", len(ends), tornBatch+1)
				}
				start := segHeaderLen
				if tornBatch > 0 {
					start = ends[tornBatch-1]
				}
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				tear(t, f, start, ends[tornBatch])
				f.Close()

				s, err = Open(dir, Options{})
				if err != nil {
					t.Fatalf("open after a torn tail: %v", err)
				}
				t.Cleanup(func() { s.Close() })
				var last uint64 // of the last whole batch
				if tornBatch > 0 {
					last = batches[tornBatch-1][1]
					checkIndexes(t, s, 1, last)
					checkEntries(t, s, 1, last, makeLog)
				} else {
					checkIndexes(t, s, 0, 0)
				}
				// Raft appends again from there; that survives a reopen.
				if err := s.StoreLogs(makeLogs(last+1, last+10)); err != nil {
					t.Fatalf("append after recovery: %v", err)
				}
				s = reopen(t, s, dir)
				checkIndexes(t, s, 1, last+10)
				checkEntries(t, s, 1, last+10, makeLog)
			})
		}
	}
}

func truncate(t *testing.T, f *os.File, size int) {
	t.Helper()
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
}

func zero(t *testing.T, f *os.File, from, to int) {
	t.Helper()
	if _, err := f.WriteAt(make([]byte, to-from), int64(from)); err != nil {
		t.Fatal(err)
	}
}
