package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/concord-io/concord/client"
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
	if !bytes.HasPrefix(buf.Bytes(), []byte(`{"format":"concord.fsm",`)) || !bytes.Contains(buf.Bytes(), []byte(`"key":"backup.a"`)) {
		t.Fatalf("payload %.200q", buf.Bytes())
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
