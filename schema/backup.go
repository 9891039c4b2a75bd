package schema

import (
	"errors"
	"fmt"
	"strconv"
)

// Backups: the leader writes a consistent copy of the state (its fsm
// snapshot encoding) to a file of its own, and a client pulls it in chunks,
// one request per chunk, so nothing is pushed faster than the client reads
// (core NATS drops messages to a slow consumer).
//
//	P.cluster.backup        {}                        → ClusterBackupReply (JSON)
//	P.cluster.backup.chunk  {id, offset, length?}     → raw bytes + headers
//
// The chunk reply is the one success reply of the API whose body is not
// JSON: the body is the backup's bytes from the requested offset, and the
// id, offset and total size travel in the Concord-Backup-* headers. An
// error reply is the usual JSON error body with the Nats-Service-Error
// headers, so a client tells the two apart by HeaderErrorCode.

// Headers of a successful P.cluster.backup.chunk reply. Each value is one
// decimal integer, except the id.
const (
	// HeaderBackupID names the backup the chunk belongs to.
	HeaderBackupID = "Concord-Backup-Id"
	// HeaderBackupOffset is the position of the body's first byte in the
	// backup.
	HeaderBackupOffset = "Concord-Backup-Offset"
	// HeaderBackupSize is the size of the whole backup in bytes; the chunk
	// that ends there is the last.
	HeaderBackupSize = "Concord-Backup-Size"
)

// ErrBadChunkReply reports a chunk reply whose headers are missing or do not
// agree with its body.
var ErrBadChunkReply = errors.New("malformed backup chunk reply")

// ClusterBackupRequest is the body of P.cluster.backup: the leader takes a
// backup now. The body is an empty object.
type ClusterBackupRequest struct{}

// ClusterBackupReply answers P.cluster.backup: the backup is ready to be
// read with P.cluster.backup.chunk until it has been idle for
// IdleTimeoutMS.
type ClusterBackupReply struct {
	// ID names the backup in chunk requests: 16 lowercase hex digits.
	ID string `json:"id"`
	// Size is the payload's length in bytes and SHA256 its SHA-256 in
	// lowercase hex.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Revision is the cluster revision the backup holds, and AppliedIndex
	// the leader's Raft index it was taken at: the state is exactly that of
	// every entry up to AppliedIndex, and nothing after it.
	Revision     int64  `json:"revision"`
	AppliedIndex uint64 `json:"applied_index"`
	// Format and FormatVersion name the payload's encoding: the state
	// machine's snapshot format ("concord.fsm") and its version.
	Format        string `json:"format"`
	FormatVersion int    `json:"format_version"`
	// ClusterID and Leader say where the backup was taken.
	ClusterID string `json:"cluster_id"`
	Leader    string `json:"leader"`
	// Created is when the leader took it, RFC 3339 in UTC.
	Created string `json:"created"`
	// MaxChunk is the most bytes one chunk reply carries.
	MaxChunk int `json:"max_chunk"`
	// IdleTimeoutMS is how long the leader keeps the backup without a
	// chunk request; it drops it sooner once its last chunk was read.
	IdleTimeoutMS int64 `json:"idle_timeout_ms"`
}

// ClusterBackupChunkRequest is the body of P.cluster.backup.chunk.
type ClusterBackupChunkRequest struct {
	ID     string `json:"id"`
	Offset int64  `json:"offset"`
	// Length is the most bytes wanted; 0 or more than the backup's
	// MaxChunk means MaxChunk.
	Length int `json:"length,omitempty"`
}

// ClusterBackupChunkReply is a successful reply to P.cluster.backup.chunk.
// On the wire its body is Data, raw, and the other fields are the headers
// HeaderBackupID, HeaderBackupOffset and HeaderBackupSize (see Header and
// ParseBackupChunk). The JSON Schema cluster.backup.chunk.reply describes
// those headers as the JSON form of this type: no reply carries it as a
// body.
type ClusterBackupChunkReply struct {
	ID     string `json:"id"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
	// Data is the reply's body: the backup's bytes from Offset, at most the
	// requested length, fewer at the end, none at Offset == Size.
	Data []byte `json:"-"`
}

// Header returns the reply's headers (a nats.Header).
func (r *ClusterBackupChunkReply) Header() map[string][]string {
	return map[string][]string{
		HeaderBackupID:     {r.ID},
		HeaderBackupOffset: {strconv.FormatInt(r.Offset, 10)},
		HeaderBackupSize:   {strconv.FormatInt(r.Size, 10)},
	}
}

// ParseBackupChunk decodes a successful chunk reply from its headers and
// body. It fails with ErrBadChunkReply when a header is missing or the body
// reaches past the size. The reply keeps body; it does not copy it.
func ParseBackupChunk(header map[string][]string, body []byte) (*ClusterBackupChunkReply, error) {
	get := func(name string) string {
		if v := header[name]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	r := &ClusterBackupChunkReply{ID: get(HeaderBackupID), Data: body}
	if r.ID == "" {
		return nil, fmt.Errorf("%w: no %s header", ErrBadChunkReply, HeaderBackupID)
	}
	var err error
	if r.Offset, err = strconv.ParseInt(get(HeaderBackupOffset), 10, 64); err != nil || r.Offset < 0 {
		return nil, fmt.Errorf("%w: %s %q", ErrBadChunkReply, HeaderBackupOffset, get(HeaderBackupOffset))
	}
	if r.Size, err = strconv.ParseInt(get(HeaderBackupSize), 10, 64); err != nil || r.Size < 0 {
		return nil, fmt.Errorf("%w: %s %q", ErrBadChunkReply, HeaderBackupSize, get(HeaderBackupSize))
	}
	if r.Offset+int64(len(body)) > r.Size {
		return nil, fmt.Errorf("%w: %d bytes at offset %d pass the size %d", ErrBadChunkReply, len(body), r.Offset, r.Size)
	}
	return r, nil
}
