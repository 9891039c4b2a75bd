package logstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	bolt "go.etcd.io/bbolt"
)

// encodeLegacy is the entry encoding of the release before the WAL
// (service/boltstore at 1ffcc6d), for writing old directories in tests.
func encodeLegacy(l *raft.Log) []byte {
	buf := []byte{legacyFormat}
	buf = binary.AppendUvarint(buf, l.Term)
	buf = append(buf, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	buf = binary.AppendVarint(buf, at)
	buf = binary.AppendUvarint(buf, uint64(len(l.Data)))
	buf = append(buf, l.Data...)
	buf = binary.AppendUvarint(buf, uint64(len(l.Extensions)))
	return append(buf, l.Extensions...)
}

// writeLegacy writes raft.db in dataDir as the old release did: the
// entries, and stable keys CurrentTerm and LastVoteTerm (big-endian) and
// LastVoteCand.
func writeLegacy(t *testing.T, dataDir string, logs []*raft.Log, term uint64, cand string) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dataDir, LegacyName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		lb, err := tx.CreateBucketIfNotExists(legacyLogs)
		if err != nil {
			return err
		}
		sb, err := tx.CreateBucketIfNotExists(legacyStable)
		if err != nil {
			return err
		}
		for _, l := range logs {
			if err := lb.Put(binary.BigEndian.AppendUint64(nil, l.Index), encodeLegacy(l)); err != nil {
				return err
			}
		}
		if err := sb.Put([]byte("CurrentTerm"), binary.BigEndian.AppendUint64(nil, term)); err != nil {
			return err
		}
		if err := sb.Put([]byte("LastVoteTerm"), binary.BigEndian.AppendUint64(nil, term-1)); err != nil {
			return err
		}
		return sb.Put([]byte("LastVoteCand"), []byte(cand))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func exists(t *testing.T, p string) bool {
	t.Helper()
	_, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// checkMigrated opens dataDir and checks it holds exactly the legacy
// content and the final layout.
func checkMigrated(t *testing.T, dataDir string, first, last, term uint64, cand string) {
	t.Helper()
	s, err := Open(dataDir, Options{})
	if err != nil {
		t.Fatalf("open after migration: %v", err)
	}
	defer s.Close()
	checkIndexes(t, s, first, last)
	checkEntries(t, s, first, last, makeLog)
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != term {
		t.Fatalf("CurrentTerm = %d, %v; want %d", v, err, term)
	}
	if v, err := s.GetUint64([]byte("LastVoteTerm")); err != nil || v != term-1 {
		t.Fatalf("LastVoteTerm = %d, %v; want %d", v, err, term-1)
	}
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != cand {
		t.Fatalf("LastVoteCand = %q, %v; want %q", v, err, cand)
	}
	for name, want := range map[string]bool{DirName: true, MigratedName: true, LegacyName: false, tempName: false} {
		if got := exists(t, filepath.Join(dataDir, name)); got != want {
			t.Fatalf("after migration %s exists: %v, want %v", name, got, want)
		}
	}
}

// The directory today's release wrote (tests/testdata, made by the
// release before the WAL) migrates with every entry and stable key as the
// old store held them; its log was compacted, so it starts past 1.
func TestMigrateTheV1TestData(t *testing.T) {
	dataDir := t.TempDir()
	src := filepath.Join("..", "..", "tests", "testdata", "datadir-v1", LegacyName)
	copyFile(t, src, filepath.Join(dataDir, LegacyName))

	old, err := openLegacy(filepath.Join(dataDir, LegacyName))
	if err != nil {
		t.Fatal(err)
	}
	first, last, err := old.bounds()
	if err != nil {
		t.Fatal(err)
	}
	if first <= 1 || last < first+50 {
		t.Fatalf("test data log holds %d-%d: want a compacted log with entries after the snapshot", first, last)
	}
	want := map[uint64]*raft.Log{}
	if err := old.forEachBatch(1000, 1<<20, func(b []*raft.Log) error {
		for _, l := range b {
			want[l.Index] = l
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stable, err := old.stable()
	if err != nil {
		t.Fatal(err)
	}
	old.close()
	term := binary.LittleEndian.Uint64(stable["CurrentTerm"])
	if term == 0 || len(stable["LastVoteCand"]) == 0 {
		t.Fatalf("test data stable keys: %q", stable)
	}

	s, err := Open(dataDir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkIndexes(t, s, first, last)
	checkEntries(t, s, first, last, func(i uint64) *raft.Log { return want[i] })
	for k, v := range stable {
		got, err := s.Get([]byte(k))
		if err != nil || string(got) != string(v) {
			t.Fatalf("stable %s = %x, %v; want %x", k, got, err, v)
		}
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != term {
		t.Fatalf("CurrentTerm = %d, %v; want %d", v, err, term)
	}
	if got, _ := os.ReadFile(filepath.Join(dataDir, MigratedName)); len(got) == 0 {
		t.Fatal("raft.db.migrated missing or empty")
	}
}

// errCrash stands for the process dying at a step.
var errCrash = errors.New("crash")

// A migration that dies after any step, once or again on the next start,
// leaves a directory that starts, migrates, and holds exactly the old
// log and stable keys.
func TestMigrationSurvivesACrashAtEveryStep(t *testing.T) {
	defer func(n int) { migrateBatchEntries = n }(migrateBatchEntries)
	migrateBatchEntries = 400
	const first, last, term, cand = 1001, 2000, 7, "n3" // three copy batches
	build := func(t *testing.T) string {
		dir := t.TempDir()
		writeLegacy(t, dir, makeLogs(first, last), term, cand)
		return dir
	}
	// Record the steps a clean migration passes through.
	var steps []string
	if err := migrate(build(t), hclog.NewNullLogger(), func(s string) error { steps = append(steps, s); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []string{stepTempRemoved, stepTempOpened, stepStableCopied, stepLogBatch, stepLogBatch, stepLogBatch,
		stepTempClosed, stepTempSynced, stepLegacyMoved, stepLegacySynced, stepInstalled, stepInstallSynced}
	if !slices.Equal(steps, want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	// crashAt returns a hook that crashes at the k-th step (0-based).
	crashAt := func(k int) crashHook {
		n := 0
		return func(string) error {
			n++
			if n-1 == k {
				return errCrash
			}
			return nil
		}
	}
	for k := range steps {
		t.Run(fmt.Sprintf("%d-%s", k, steps[k]), func(t *testing.T) {
			dir := build(t)
			if err := migrate(dir, hclog.NewNullLogger(), crashAt(k)); !errors.Is(err, errCrash) {
				t.Fatalf("migration with a crash at %s: %v", steps[k], err)
			}
			checkMigrated(t, dir, first, last, term, cand)
		})
		// A second crash on the restart, at every step that restart
		// passes through.
		for j := 0; j < len(steps); j++ {
			t.Run(fmt.Sprintf("%d-%s-then-%d", k, steps[k], j), func(t *testing.T) {
				dir := build(t)
				if err := migrate(dir, hclog.NewNullLogger(), crashAt(k)); !errors.Is(err, errCrash) {
					t.Fatalf("first crash: %v", err)
				}
				if err := migrate(dir, hclog.NewNullLogger(), crashAt(j)); err != nil && !errors.Is(err, errCrash) {
					t.Fatalf("restart with a crash at step %d: %v", j, err)
				}
				checkMigrated(t, dir, first, last, term, cand)
			})
		}
	}
}

// An old log that migrated as empty (a node that only ever had a
// snapshot) keeps its stable keys.
func TestMigrateAnEmptyLog(t *testing.T) {
	dir := t.TempDir()
	writeLegacy(t, dir, nil, 3, "n1")
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkIndexes(t, s, 0, 0)
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 3 {
		t.Fatalf("CurrentTerm = %d, %v", v, err)
	}
	if err := s.StoreLogs(makeLogs(51, 60)); err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, s, 51, 60)
}

// A zero-length raft.db (the old release died creating it) holds nothing.
func TestMigrateAZeroLengthFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, LegacyName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkIndexes(t, s, 0, 0)
	if !exists(t, filepath.Join(dir, MigratedName)) {
		t.Fatal("raft.db.migrated missing")
	}
}

// A damaged old log is refused and left as it was, with no new log: the
// next start refuses it again instead of starting on a partial copy.
func TestMigrationRefusesADamagedLog(t *testing.T) {
	cases := map[string]func(t *testing.T, dir string){
		"gap": func(t *testing.T, dir string) {
			logs := makeLogs(1, 20)
			writeLegacy(t, dir, append(logs[:10], logs[11:]...), 2, "n1")
		},
		"bad entry": func(t *testing.T, dir string) {
			writeLegacy(t, dir, makeLogs(1, 20), 2, "n1")
			rewriteLegacy(t, dir, func(logs, _ *bolt.Bucket) error {
				return logs.Put(binary.BigEndian.AppendUint64(nil, 5), []byte{9, 9})
			})
		},
		"bad term": func(t *testing.T, dir string) {
			writeLegacy(t, dir, makeLogs(1, 20), 2, "n1")
			rewriteLegacy(t, dir, func(_, stable *bolt.Bucket) error {
				return stable.Put([]byte("CurrentTerm"), []byte{1})
			})
		},
		"not bbolt": func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, LegacyName), []byte("not a database at all, but long enough to be read"), 0o600); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			setup(t, dir)
			before, _ := os.ReadFile(filepath.Join(dir, LegacyName))
			for range 2 {
				if s, err := Open(dir, Options{}); err == nil {
					s.Close()
					t.Fatal("a damaged raft.db migrated")
				}
				if after, _ := os.ReadFile(filepath.Join(dir, LegacyName)); string(after) != string(before) {
					t.Fatal("raft.db changed")
				}
				if exists(t, filepath.Join(dir, DirName)) || exists(t, filepath.Join(dir, MigratedName)) {
					t.Fatal("a refused migration installed a log")
				}
			}
		})
	}
}

func rewriteLegacy(t *testing.T, dir string, f func(logs, stable *bolt.Bucket) error) {
	t.Helper()
	db, err := bolt.Open(filepath.Join(dir, LegacyName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return f(tx.Bucket(legacyLogs), tx.Bucket(legacyStable)) }); err != nil {
		t.Fatal(err)
	}
}

// migratedDir returns a data directory whose old log has been migrated.
func migratedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeLegacy(t, dir, makeLogs(1, 10), 2, "n1")
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return dir
}

// States no crash produces are refused, and nothing is changed.
func TestMigrationRefusesUnexplainedLayouts(t *testing.T) {
	t.Run("both logs", func(t *testing.T) {
		dir := migratedDir(t)
		// An operator puts the old log back without moving wal away.
		copyFile(t, filepath.Join(dir, MigratedName), filepath.Join(dir, LegacyName))
		if _, err := Open(dir, Options{}); !errors.Is(err, ErrTwoLogs) {
			t.Fatalf("Open with raft.db and wal: %v, want ErrTwoLogs", err)
		}
		if !exists(t, filepath.Join(dir, LegacyName)) {
			t.Fatal("raft.db was moved")
		}
	})
	t.Run("copy without source", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, tempName), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, Options{}); !errors.Is(err, ErrLayout) {
			t.Fatalf("Open with only wal.migrating: %v, want ErrLayout", err)
		}
		if exists(t, filepath.Join(dir, DirName)) || !exists(t, filepath.Join(dir, tempName)) {
			t.Fatal("the layout was changed")
		}
	})
	t.Run("old log moved aside, no new one", func(t *testing.T) {
		dir := migratedDir(t)
		// The new log is lost; starting as a new node would forget the
		// term and the vote.
		if err := os.RemoveAll(filepath.Join(dir, DirName)); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, Options{}); !errors.Is(err, ErrLayout) {
			t.Fatalf("Open with only raft.db.migrated: %v, want ErrLayout", err)
		}
		if exists(t, filepath.Join(dir, DirName)) || !exists(t, filepath.Join(dir, MigratedName)) {
			t.Fatal("the layout was changed")
		}
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
