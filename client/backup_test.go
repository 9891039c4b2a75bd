package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

// Backup pulls the whole payload and checks it against the leader's size
// and checksum; a chunk of an unknown backup matches ErrBackupNotFound.
func TestBackup(t *testing.T) {
	c := connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.Put(ctx, schema.KVPutRequest{Key: "backup.a", Value: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	b, err := c.Backup(ctx, &buf)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	if int64(buf.Len()) != b.Size || hex.EncodeToString(sum[:]) != b.SHA256 || b.Revision < p.Revision || b.Format != "concord.fsm" {
		t.Fatalf("backup %+v of %d bytes", b, buf.Len())
	}
	// The payload is a state machine snapshot in the current version, and
	// holds the key.
	st := fsm.New()
	if !bytes.HasPrefix(buf.Bytes(), []byte(fmt.Sprintf("%s v%d\n", fsm.SnapshotFormat, fsm.SnapshotVersion))) || b.FormatVersion != fsm.SnapshotVersion {
		t.Fatalf("payload version %d: %.40q", b.FormatVersion, buf.Bytes())
	}
	if err := st.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if kvs := st.Get(fsm.GetQuery{Key: "backup.a"}, st.Now()).KVs; len(kvs) != 1 || string(kvs[0].Value) != `{"n":1}` {
		t.Fatalf("backup.a in the payload: %+v", kvs)
	}

	// The same backup, read again in small chunks while the leader keeps it.
	ch, err := c.BackupChunk(ctx, schema.ClusterBackupChunkRequest{ID: b.ID, Offset: 10, Length: 7})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Offset != 10 || ch.Size != b.Size || !bytes.Equal(ch.Data, buf.Bytes()[10:17]) {
		t.Fatalf("chunk %+v %q", ch, ch.Data)
	}

	_, err = c.BackupChunk(ctx, schema.ClusterBackupChunkRequest{ID: "0123456789abcdef", Offset: 0})
	var ce *client.Error
	if !errors.Is(err, client.ErrBackupNotFound) || errors.Is(err, client.ErrNodeNotFound) || !errors.As(err, &ce) || ce.Code != 404 {
		t.Fatalf("unknown backup: %v", err)
	}
}

// OnBackupStarted sees the backup's description before any payload is
// written, and its error ends the backup; BackupRequestTimeout bounds each
// request, so a context without a deadline will do.
func TestBackupOptions(t *testing.T) {
	c := connect(t)
	var buf bytes.Buffer
	var started *schema.ClusterBackupReply
	calls := 0
	b, err := c.Backup(context.Background(), &buf,
		client.OnBackupStarted(func(r *schema.ClusterBackupReply) error {
			calls++
			started = r
			if buf.Len() != 0 {
				t.Errorf("%d payload bytes written before the start was reported", buf.Len())
			}
			buf.WriteString("header\n")
			return nil
		}),
		client.BackupRequestTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || started == nil || *started != *b {
		t.Fatalf("started %d times with %+v, backup %+v", calls, started, b)
	}
	payload, ok := bytes.CutPrefix(buf.Bytes(), []byte("header\n"))
	sum := sha256.Sum256(payload)
	if !ok || int64(len(payload)) != b.Size || hex.EncodeToString(sum[:]) != b.SHA256 {
		t.Fatalf("file of %d bytes for a backup of %d", buf.Len(), b.Size)
	}

	refused := errors.New("no room for the header")
	buf.Reset()
	_, err = c.Backup(context.Background(), &buf, client.OnBackupStarted(func(*schema.ClusterBackupReply) error { return refused }))
	if !errors.Is(err, refused) || buf.Len() != 0 {
		t.Fatalf("refused start: %v, %d bytes written", err, buf.Len())
	}

	// A request timeout of 0 ends each request at once, as a context's.
	_, err = c.Backup(context.Background(), &buf, client.BackupRequestTimeout(0),
		client.OnBackupStarted(func(*schema.ClusterBackupReply) error { t.Error("started"); return nil }))
	if !errors.Is(err, client.ErrUnavailable) || buf.Len() != 0 {
		t.Fatalf("request timeout 0: %v, %d bytes written", err, buf.Len())
	}
}
