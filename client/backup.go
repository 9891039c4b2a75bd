package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// ErrBackupCorrupt reports backup bytes that do not add up to the size and
// SHA-256 the leader announced.
var ErrBackupCorrupt = errors.New("backup does not match its size or checksum")

// BackupStart asks the leader to take a backup of the whole state now and
// keep it for BackupChunk. Writing a large state takes a while, so one
// attempt waits as long as ctx allows instead of the client's attempt
// timeout (a second request would take a second backup); it is retried when
// no leader answered or the answer was a 503.
func (c *Client) BackupStart(ctx context.Context) (*schema.ClusterBackupReply, error) {
	msg, err := c.request(ctx, subjects.ClusterBackup, schema.ClusterBackupRequest{}, "", 0)
	if err != nil {
		return nil, err
	}
	var r schema.ClusterBackupReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, fmt.Errorf("decode %s reply: %w", subjects.ClusterBackup, err)
	}
	return &r, nil
}

// BackupChunk reads one chunk of a backup: up to req.Length bytes (the
// backup's MaxChunk when 0) from req.Offset. Its reply is raw bytes, which
// the returned Data holds. A backup the leader no longer holds fails with
// ErrBackupNotFound.
func (c *Client) BackupChunk(ctx context.Context, req schema.ClusterBackupChunkRequest) (*schema.ClusterBackupChunkReply, error) {
	msg, err := c.request(ctx, subjects.ClusterBackupChunk, req, "", c.opts.attempt)
	if err != nil {
		return nil, err
	}
	r, err := schema.ParseBackupChunk(msg.Header, msg.Data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", subjects.ClusterBackupChunk, err)
	}
	if r.ID != req.ID || r.Offset != req.Offset {
		return nil, fmt.Errorf("%s: %w: asked for backup %s at %d, got %s at %d", subjects.ClusterBackupChunk, schema.ErrBadChunkReply, req.ID, req.Offset, r.ID, r.Offset)
	}
	return r, nil
}

// BackupOption configures Backup.
type BackupOption func(*backupOptions)

type backupOptions struct {
	started        func(*schema.ClusterBackupReply) error
	requestTimeout *time.Duration
}

// OnBackupStarted has Backup call f with the backup's description once the
// leader has taken it, before any of the payload is written to w: a backup
// file writes its header there. An error from f ends Backup with it.
func OnBackupStarted(f func(*schema.ClusterBackupReply) error) BackupOption {
	return func(o *backupOptions) { o.started = f }
}

// BackupRequestTimeout bounds each request of Backup by d (the start, then
// each chunk, retries included), so that ctx need not bound the whole
// transfer: a large backup goes on as long as its chunks keep coming. Like
// a context timeout, a d of 0 or less ends each request at once.
func BackupRequestTimeout(d time.Duration) BackupOption {
	return func(o *backupOptions) { o.requestTimeout = &d }
}

// Backup takes a backup and writes its payload (the state in the fsm
// snapshot format the reply names) to w, one chunk at a time, and checks
// its size and SHA-256: a mismatch fails with ErrBackupCorrupt. ctx bounds
// the whole transfer, and BackupRequestTimeout each request. It returns the
// backup's description, which a backup file's header records.
func (c *Client) Backup(ctx context.Context, w io.Writer, opts ...BackupOption) (*schema.ClusterBackupReply, error) {
	var o backupOptions
	for _, f := range opts {
		f(&o)
	}
	requestCtx := func() (context.Context, context.CancelFunc) {
		if o.requestTimeout != nil {
			return context.WithTimeout(ctx, *o.requestTimeout)
		}
		return context.WithCancel(ctx)
	}
	rctx, cancel := requestCtx()
	b, err := c.BackupStart(rctx)
	cancel()
	if err != nil {
		return nil, err
	}
	if o.started != nil {
		if err := o.started(b); err != nil {
			return nil, err
		}
	}
	sum := sha256.New()
	for off := int64(0); off < b.Size; {
		rctx, cancel := requestCtx()
		ch, err := c.BackupChunk(rctx, schema.ClusterBackupChunkRequest{ID: b.ID, Offset: off, Length: b.MaxChunk})
		cancel()
		if err != nil {
			return nil, err
		}
		if len(ch.Data) == 0 || ch.Size != b.Size {
			return nil, fmt.Errorf("%w: backup %s: chunk at %d has %d bytes of a backup of %d, want some of %d", ErrBackupCorrupt, b.ID, off, len(ch.Data), ch.Size, b.Size)
		}
		if _, err := w.Write(ch.Data); err != nil {
			return nil, fmt.Errorf("write backup %s: %w", b.ID, err)
		}
		sum.Write(ch.Data)
		off += int64(len(ch.Data))
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != b.SHA256 {
		return nil, fmt.Errorf("%w: backup %s has SHA-256 %s, the leader announced %s", ErrBackupCorrupt, b.ID, got, b.SHA256)
	}
	return b, nil
}
