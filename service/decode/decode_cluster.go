package decode

import (
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
	"github.com/concord-io/concord/subjects"
)

// Join decodes a P.cluster.Join body: a valid node id and the Raft
// address the leader reaches the joining node at.
func (d *Decoder) Join(data []byte) (schema.ClusterJoinRequest, *schema.Error) {
	var req schema.ClusterJoinRequest
	if e := Strict(data, &req); e != nil {
		return req, e
	}
	if err := subjects.ValidateNodeID(req.ID); err != nil {
		return req, Invalid("id: the %v", err)
	}
	if req.Address == "" {
		return req, Invalid("address is required: the Raft address (host:port) the leader reaches the joining node at")
	}
	return req, nil
}

// Remove decodes a P.cluster.Remove body: a valid node id.
func (d *Decoder) Remove(data []byte) (schema.ClusterRemoveRequest, *schema.Error) {
	var req schema.ClusterRemoveRequest
	if e := Strict(data, &req); e != nil {
		return req, e
	}
	if err := subjects.ValidateNodeID(req.ID); err != nil {
		return req, Invalid("id: the %v", err)
	}
	return req, nil
}

// BackupChunk decodes a P.cluster.backup.chunk body: a backup id as
// cluster.backup returned it, and an offset and length that are not
// negative.
func (d *Decoder) BackupChunk(data []byte) (schema.ClusterBackupChunkRequest, *schema.Error) {
	var req schema.ClusterBackupChunkRequest
	if e := Strict(data, &req); e != nil {
		return req, e
	}
	if !datadir.ValidID(req.ID) {
		return req, Invalid("id must be a backup id of 16 lowercase hexadecimal digits, as cluster.backup returned it, not %q", shorten(req.ID))
	}
	if req.Offset < 0 {
		return req, Invalid("offset must be 0 or more, not %d", req.Offset)
	}
	if req.Length < 0 {
		return req, Invalid("length must be 0 or more, not %d", req.Length)
	}
	return req, nil
}
