package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"

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
	msg, err := c.request(ctx, subjects.ClusterBackup, schema.ClusterBackupRequest{}, 0)
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
	msg, err := c.request(ctx, subjects.ClusterBackupChunk, req, c.opts.attempt)
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

// Backup takes a backup and writes its payload (the state in the fsm
// snapshot format the reply names) to w, one chunk at a time, and checks
// its size and SHA-256: a mismatch fails with ErrBackupCorrupt. ctx bounds
// the whole transfer. It returns the backup's description, which a backup
// file's header records.
func (c *Client) Backup(ctx context.Context, w io.Writer) (*schema.ClusterBackupReply, error) {
	b, err := c.BackupStart(ctx)
	if err != nil {
		return nil, err
	}
	sum := sha256.New()
	for off := int64(0); off < b.Size; {
		ch, err := c.BackupChunk(ctx, schema.ClusterBackupChunkRequest{ID: b.ID, Offset: off, Length: b.MaxChunk})
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

// request is call for replies that are not (only) JSON: it sends req until
// an answer that is not a retryable error, or ctx ends, and returns a
// success reply as it came. attempt bounds each try; 0 lets a try last as
// long as ctx.
func (c *Client) request(ctx context.Context, ep subjects.Endpoint, req any, attempt time.Duration) (*nats.Msg, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode %s request: %w", ep, err)
	}
	msg := nats.NewMsg(c.names.Request(ep))
	msg.Data = data
	backoff := 20 * time.Millisecond
	var last error
	for {
		resp, err := c.attempt(ctx, msg, attempt)
		switch {
		case errors.Is(err, ErrPermissionDenied), errors.Is(err, nats.ErrMaxPayload):
			return nil, fmt.Errorf("%s: %w", ep, err) // no retry can succeed
		case err == nil && resp.Header.Get(schema.HeaderErrorCode) != "":
			var er schema.ErrorReply
			if err := json.Unmarshal(resp.Data, &er); err != nil || er.Error == nil {
				return nil, fmt.Errorf("%s: undecodable error reply %q", ep, resp.Data)
			}
			e := fromWire(er.Error)
			if !e.Retryable() {
				return nil, e
			}
			last = e
		case err == nil:
			return resp, nil
		case errors.Is(err, nats.ErrConnectionClosed):
			return nil, fmt.Errorf("%s: %w", ep, err)
		default: // no responders (no leader yet), a timeout, a reconnect
			if last == nil || ctx.Err() == nil {
				last = err // the end of ctx says less than the attempt before
			}
		}
		if ctx.Err() != nil {
			if last == nil {
				last = ctx.Err()
			}
			return nil, fmt.Errorf("%s: %w (last attempt: %v)", ep, ErrUnavailable, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, time.Second)
	}
}
