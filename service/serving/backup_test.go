package serving

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// writeBytes is a backup store source of fixed content.
func writeBytes(b []byte) io.WriterTo { return bytes.NewReader(b) }

// failingSource is a backup store source whose write fails.
type failingSource struct{ err error }

func (f failingSource) WriteTo(io.Writer) (int64, error) { return 0, f.err }

func TestBackupStoreLifecycle(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "backups")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(dir, "0123456789abcdef.backup")
	if err := os.WriteFile(leftover, []byte("from a crashed process"), 0o600); err != nil {
		t.Fatal(err)
	}
	bs := newBackupStore(dir, quietLog())
	bs.idle, bs.grace, bs.limit = 300*time.Millisecond, 50*time.Millisecond, 2

	payload := bytes.Repeat([]byte("0123456789"), 100)
	a, err := bs.create(writeBytes(payload))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover of an earlier process: %v", err)
	}
	sum := sha256.Sum256(payload)
	if a.size != int64(len(payload)) || a.sha256 != hex.EncodeToString(sum[:]) || !datadir.ValidID(a.id) {
		t.Fatalf("backup %+v", a)
	}
	b, err := bs.create(writeBytes([]byte("b")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bs.create(writeBytes([]byte("c"))); !errors.Is(err, errTooManyBackups) {
		t.Fatalf("third backup: %v, want errTooManyBackups", err)
	}
	if _, err := bs.create(failingSource{errors.New("disk full")}); err == nil {
		t.Fatal("a failed write was kept")
	}

	// Reading a in chunks keeps it past its idle time.
	var got []byte
	for off := int64(0); off < a.size; off += 100 {
		ch, e := bs.read(a.id, off, 100)
		if e != nil {
			t.Fatal(e)
		}
		if ch.ID != a.id || ch.Offset != off || ch.Size != a.size {
			t.Fatalf("chunk %+v", ch)
		}
		got = append(got, ch.Data...)
		if off == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("chunks do not add up to the payload")
	}
	if _, e := bs.read(a.id, a.size+1, 10); e == nil || e.Name != schema.ErrInvalidRequest {
		t.Fatalf("read past the end: %v", e)
	}
	// A retry of the last chunk works during the grace period.
	if ch, e := bs.read(a.id, a.size-10, 100); e != nil || len(ch.Data) != 10 {
		t.Fatalf("retry of the last chunk: %v, %+v", e, ch)
	}
	if ch, e := bs.read(a.id, a.size, 100); e != nil || len(ch.Data) != 0 {
		t.Fatalf("read at the end: %v, %+v", e, ch)
	}
	waitGone := func(f *backupFile, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			// Look without reading: a read keeps the backup.
			bs.mu.Lock()
			held := bs.files[f.id] != nil
			bs.mu.Unlock()
			_, statErr := os.Stat(f.path)
			if !held && errors.Is(statErr, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("backup %s still there after %s: held %v, %v", f.id, within, held, statErr)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, e := bs.read(f.id, 0, 1); e == nil || e.Name != schema.ErrBackupNotFound {
			t.Fatalf("read of a dropped backup: %v", e)
		}
	}
	waitGone(a, time.Second)
	// b was never read: it goes after its idle time.
	waitGone(b, 2*time.Second)
	if n := bs.held(); n != 0 {
		t.Fatalf("%d backups held", n)
	}

	c, err := bs.create(writeBytes([]byte("c")))
	if err != nil {
		t.Fatal(err)
	}
	bs.close()
	if _, err := os.Stat(c.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("close left %s: %v", c.path, err)
	}
	if _, err := bs.create(writeBytes([]byte("d"))); !errors.Is(err, errBackupsClosed) {
		t.Fatalf("create after close: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("files left: %v", entries)
	}
}

// held reports how many backups the store keeps.
func (bs *backupStore) held() int {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return len(bs.files)
}
