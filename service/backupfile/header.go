package backupfile

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
)

// Magic starts the first line of every backup file, and the file's version
// follows it: "concord-backup v1".
const Magic = "concord-backup"

// FileVersion is the version of the backup file layout this build writes.
// It reads every version up to it, and a golden file of each version
// (tests/testdata) must keep restoring.
const FileVersion = 1

// maxHeaderLine bounds each header line, so a file that is not a backup is
// refused without reading all of it.
const maxHeaderLine = 64 << 10

// Errors of reading and restoring backup files, to test with errors.Is.
var (
	// ErrBadBackup: the file is not a Concord backup, or it is truncated
	// or malformed.
	ErrBadBackup = errors.New("not a valid backup file")
	// ErrChecksum: the payload's SHA-256 is not the one the header
	// records; the file is corrupt.
	ErrChecksum = errors.New("backup checksum mismatch")
	// ErrUnsupported: the file or its payload has a version this build
	// cannot read (made by a newer Concord).
	ErrUnsupported = errors.New("unsupported backup version")
	// ErrDataDirNotEmpty: a restore was asked to write into a directory
	// that holds something.
	ErrDataDirNotEmpty = errors.New("data directory is not empty")
)

// Header is the second line of a backup file, one JSON object: what the
// payload after it is.
type Header struct {
	// Format and FormatVersion name the payload's encoding (the fsm
	// snapshot format, fsm.SnapshotFormat, and its version).
	Format        string `json:"format"`
	FormatVersion int    `json:"format_version"`
	// Revision is the cluster revision the backup holds, and AppliedIndex
	// the Raft index of the cluster it came from that it was taken at.
	Revision     int64  `json:"revision"`
	AppliedIndex uint64 `json:"applied_index"`
	// ClusterID and Leader say where it was taken, Created when (RFC 3339,
	// UTC, the leader's clock).
	ClusterID string `json:"cluster_id"`
	Leader    string `json:"leader"`
	Created   string `json:"created"`
	// Size and SHA256 describe the payload: its length in bytes and its
	// SHA-256 in lowercase hex.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// NewHeader returns the header of a file holding the backup r describes.
func NewHeader(r *schema.ClusterBackupReply) Header {
	return Header{
		Format: r.Format, FormatVersion: r.FormatVersion,
		Revision: r.Revision, AppliedIndex: r.AppliedIndex,
		ClusterID: r.ClusterID, Leader: r.Leader, Created: r.Created,
		Size: r.Size, SHA256: r.SHA256,
	}
}

// WriteHeader writes the two header lines of a backup file; the payload
// follows them.
func WriteHeader(w io.Writer, h Header) error {
	line, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode the backup header: %w", err)
	}
	if _, err := fmt.Fprintf(w, "%s v%d\n%s\n", Magic, FileVersion, line); err != nil {
		return fmt.Errorf("write the backup header: %w", err)
	}
	return nil
}

// ReadHeader reads and checks the two header lines of a backup file,
// leaving r at the payload. It fails with ErrBadBackup or ErrUnsupported.
func ReadHeader(r *bufio.Reader) (Header, error) {
	h, _, _, err := readHeader(r)
	return h, err
}

// readHeader is ReadHeader that also returns the file's version and how
// many bytes the header took.
func readHeader(r *bufio.Reader) (h Header, version int, size int64, err error) {
	fail := func(err error) (Header, int, int64, error) { return Header{}, 0, 0, err }
	magic, err := readHeaderLine(r)
	if err != nil {
		return fail(fmt.Errorf("%w: first line: %w", ErrBadBackup, err))
	}
	ver, ok := strings.CutPrefix(string(magic), Magic+" v")
	n, err := strconv.Atoi(ver)
	if !ok || err != nil || n < 1 || strconv.Itoa(n) != ver {
		return fail(fmt.Errorf("%w: the first line is %.64q, not %q", ErrBadBackup, magic, fmt.Sprintf("%s v%d", Magic, FileVersion)))
	}
	if n > FileVersion {
		return fail(fmt.Errorf("%w: the file is %s v%d; this build reads versions up to %d", ErrUnsupported, Magic, n, FileVersion))
	}
	line, err := readHeaderLine(r)
	if err != nil {
		return fail(fmt.Errorf("%w: header line: %w", ErrBadBackup, err))
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return fail(fmt.Errorf("%w: header line: %w", ErrBadBackup, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return fail(fmt.Errorf("%w: header line: data after the JSON object", ErrBadBackup))
	}
	switch {
	case h.Format != fsm.SnapshotFormat:
		return fail(fmt.Errorf("%w: the payload's format is %q; this build reads %q", ErrUnsupported, h.Format, fsm.SnapshotFormat))
	case h.FormatVersion < 1 || h.FormatVersion > fsm.SnapshotVersion:
		return fail(fmt.Errorf("%w: the payload is %s version %d; this build reads versions 1 to %d", ErrUnsupported, h.Format, h.FormatVersion, fsm.SnapshotVersion))
	case h.Size < 1 || h.Revision < 0:
		return fail(fmt.Errorf("%w: header: size %d, revision %d", ErrBadBackup, h.Size, h.Revision))
	case len(h.SHA256) != sha256.Size*2 || !datadir.IsLowerHex(h.SHA256):
		return fail(fmt.Errorf("%w: header: sha256 %q is not a SHA-256 in lowercase hex", ErrBadBackup, h.SHA256))
	}
	return h, n, int64(len(magic) + len(line) + 2), nil
}

// readHeaderLine reads one line of at most maxHeaderLine bytes and returns
// it without its newline.
func readHeaderLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxHeaderLine {
			return nil, fmt.Errorf("no end of line within %d bytes", maxHeaderLine)
		}
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil, errors.New("the file ends inside the header")
		default:
			return nil, err
		}
	}
}
