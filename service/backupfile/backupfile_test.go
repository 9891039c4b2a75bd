package backupfile

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/concord-io/concord/fsm"
)

// goldenPayload returns an fsm snapshot golden file: a payload as a leader
// writes it.
func goldenPayload(t *testing.T, version int) []byte {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("../../fsm/testdata/snapshot-v%d.golden", version))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// payloadState decodes a payload.
func payloadState(t *testing.T, payload []byte) *fsm.State {
	t.Helper()
	st := fsm.New()
	if err := st.Restore(bytes.NewReader(payload)); err != nil {
		t.Fatal(err)
	}
	return st
}

// backupFileBytes frames payload as a backup file, with edit applied to
// its header first.
func backupFileBytes(t *testing.T, payload []byte, formatVersion int, edit func(*Header)) []byte {
	t.Helper()
	sum := sha256.Sum256(payload)
	h := Header{
		Format: fsm.SnapshotFormat, FormatVersion: formatVersion,
		Revision: payloadState(t, payload).Revision(), AppliedIndex: 42,
		ClusterID: "9f86d081884c7d65", Leader: "n1", Created: "2026-12-02T10:15:30Z",
		Size: int64(len(payload)), SHA256: hex.EncodeToString(sum[:]),
	}
	if edit != nil {
		edit(&h)
	}
	var buf bytes.Buffer
	if err := WriteHeader(&buf, h); err != nil {
		t.Fatal(err)
	}
	buf.Write(payload)
	return buf.Bytes()
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "backup")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVerify(t *testing.T) {
	for v := 1; v <= fsm.SnapshotVersion; v++ {
		payload := goldenPayload(t, v)
		info, err := Verify(writeFile(t, backupFileBytes(t, payload, v, nil)))
		if err != nil {
			t.Fatalf("fsm v%d: %v", v, err)
		}
		st := payloadState(t, payload)
		explicit, anonymous := st.LeaseCount()
		if info.FileVersion != FileVersion || info.Keys != st.KeyCount() || info.Leases != explicit+anonymous || info.Header.Revision != st.Revision() {
			t.Fatalf("fsm v%d: %+v", v, info)
		}
		r := bufio.NewReader(bytes.NewReader(backupFileBytes(t, payload, v, nil)))
		if h, err := ReadHeader(r); err != nil || h.FormatVersion != v {
			t.Fatalf("ReadHeader: %+v, %v", h, err)
		}
		if rest, _ := io.ReadAll(r); !bytes.Equal(rest, payload) {
			t.Fatal("ReadHeader does not leave the reader at the payload")
		}
	}

	payload := goldenPayload(t, fsm.SnapshotVersion)
	good := backupFileBytes(t, payload, fsm.SnapshotVersion, nil)
	headerLen := bytes.IndexByte(good[bytes.IndexByte(good, '\n')+1:], '\n') + bytes.IndexByte(good, '\n') + 2
	flipped := bytes.Clone(good)
	flipped[headerLen+len(payload)/2] ^= 0x01
	for _, c := range []struct {
		name string
		data []byte
		want error
	}{
		{"a flipped payload byte", flipped, ErrChecksum},
		{"truncated", good[:len(good)-1], ErrBadBackup},
		{"truncated in the header", good[:headerLen-3], ErrBadBackup},
		{"data after the payload", append(bytes.Clone(good), '\n'), ErrBadBackup},
		{"empty", nil, ErrBadBackup},
		{"not a backup", []byte("hello\nworld\n"), ErrBadBackup},
		{"an fsm snapshot alone", payload, ErrBadBackup},
		{"file version 2", bytes.Replace(good, []byte(Magic+" v1\n"), []byte(Magic+" v2\n"), 1), ErrUnsupported},
		{"file version v01", bytes.Replace(good, []byte(Magic+" v1\n"), []byte(Magic+" v01\n"), 1), ErrBadBackup},
		{"payload version 99", backupFileBytes(t, payload, 99, nil), ErrUnsupported},
		{"another payload format", backupFileBytes(t, payload, 3, func(h *Header) { h.Format = "etcd" }), ErrUnsupported},
		{"a header revision the payload does not hold", backupFileBytes(t, payload, 3, func(h *Header) { h.Revision++ }), ErrBadBackup},
		{"a bad sha256", backupFileBytes(t, payload, 3, func(h *Header) { h.SHA256 = strings.ToUpper(h.SHA256) }), ErrBadBackup},
		{"an unknown header field", bytes.Replace(good, []byte(`{"format"`), []byte(`{"x":1,"format"`), 1), ErrBadBackup},
		{"an endless first line", bytes.Repeat([]byte("x"), maxHeaderLine+10), ErrBadBackup},
	} {
		_, err := Verify(writeFile(t, c.data))
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := Verify(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestRestoreBackupRefusals(t *testing.T) {
	payload := goldenPayload(t, fsm.SnapshotVersion)
	good := writeFile(t, backupFileBytes(t, payload, fsm.SnapshotVersion, nil))
	bad := backupFileBytes(t, payload, fsm.SnapshotVersion, nil)
	bad[len(bad)-5] ^= 0x20
	badPath := writeFile(t, bad)
	opts := func(dir string) RestoreOptions {
		return RestoreOptions{DataDir: dir, NodeID: "r1", RaftAddr: "127.0.0.1:7422"}
	}

	// A corrupt file writes nothing: a new directory is not made, an empty
	// one stays empty.
	fresh := filepath.Join(t.TempDir(), "new")
	if _, err := Restore(badPath, opts(fresh)); !errors.Is(err, ErrChecksum) {
		t.Fatalf("corrupt file: %v", err)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("corrupt file made the directory: %v", err)
	}
	empty := t.TempDir()
	if _, err := Restore(badPath, opts(empty)); !errors.Is(err, ErrChecksum) {
		t.Fatalf("corrupt file: %v", err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Fatalf("corrupt file wrote %v", entries)
	}

	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "raft.db"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(good, opts(full)); !errors.Is(err, ErrDataDirNotEmpty) {
		t.Fatalf("non-empty directory: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(full, "raft.db")); string(b) != "mine" {
		t.Fatal("a refused restore changed the directory")
	}
	if _, err := Restore(good, RestoreOptions{DataDir: t.TempDir(), NodeID: "a.b", RaftAddr: "127.0.0.1:1"}); err == nil {
		t.Fatal("bad node id accepted")
	}
	if _, err := Restore(good, RestoreOptions{DataDir: t.TempDir(), NodeID: "r1", RaftAddr: "nowhere"}); err == nil {
		t.Fatal("bad raft address accepted")
	}
}
