package service

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/logstore"
	"github.com/concord-io/concord/subjects"
)

// Backup and restore.
//
// Taking a backup (P.cluster.backup, leader only): the leader first commits
// a tick entry (an expire of no lease), stamped with its lease clock. That
// orders the backup after every write committed before the request, and
// makes the backup's lease clock the leader's "now", so every lease keeps
// exactly the time it had left when the backup was asked for. Then, under
// the state machine's lock, it takes the O(1) copy-on-write fsm snapshot
// together with the applied index and revision of that same moment, and
// writes its encoding (format concord.fsm, JSON lines) to a file in
// <data-dir>/backups while hashing it. Apply goes on meanwhile.
//
// Reading it (P.cluster.backup.chunk): the client pulls the file one chunk
// per request, well below the NATS max payload. A pull keeps one chunk in
// flight, so core NATS never has to drop a reply to a slow consumer. The
// chunk reply's body is raw bytes with the Concord-Backup-* headers, not
// JSON (see schema.ClusterBackupChunkReply). The leader drops a backup
// backupDoneGrace after its last chunk was read (a retry of that chunk
// still works meanwhile), after backupIdleTimeout without a request, and
// when the node stops; it keeps at most backupMaxInProgress at once. A
// backup lives on the leader that took it: after a leader change its chunks
// are "backup_not_found", and the client starts again.
//
// The backup file (`concord snapshot save`): a magic line with the file
// version, one line of JSON (BackupHeader: payload format and version,
// revision, applied index, where and when it was taken, size and SHA-256 of
// the payload), then the payload, byte for byte as the leader wrote it.
//
// Restoring (RestoreBackup, `concord snapshot restore`) seeds an empty data
// directory so that `concord serve` starts a NEW single-node cluster whose
// state is exactly the backup's. It writes what raft.BootstrapCluster would,
// except that the first entry is a snapshot instead of a log entry: the
// stable store's current term is 1, and the snapshot store holds one Raft
// snapshot at index 1, term 1, whose configuration is the new node alone, as
// a voter. Its data is the backup's payload framed as fsmSnapshot.Persist
// frames it (the applied index, 1, then the fsm snapshot). This is the state
// raft.RecoverCluster leaves behind (a snapshot that carries the
// configuration, and no log), which RecoverCluster itself cannot produce
// from nothing. On start, Raft restores the snapshot into the state machine,
// takes the configuration from it, and elects the node in term 2; the first
// new entry is index 2. Nodes that join with --join get the state by a
// snapshot install, since the log holds nothing before index 2. The fsm
// snapshot carries the lease clock with the lease deadlines, and a new
// leader resumes the clock from the state's time, so leases keep their
// remaining time; the revision counter, the lease id counter, the
// idempotency cache and the change log are in the snapshot too. The data
// directory gets a new cluster id, so the restored cluster never mixes
// with the one the backup came from.

// Backup limits.
const (
	// backupMaxChunk is the most bytes one chunk reply carries, unless the
	// connection's max payload is smaller.
	backupMaxChunk = 256 << 10
	// backupChunkHeadroom is kept free below the max payload for the
	// reply's subject and headers.
	backupChunkHeadroom = 8 << 10
	// backupIdleTimeout is how long a backup is kept without a chunk
	// request.
	backupIdleTimeout = time.Minute
	// backupDoneGrace is how long a backup is kept after its last chunk was
	// read, so that a retry of that chunk still finds it.
	backupDoneGrace = 10 * time.Second
	// backupMaxInProgress is how many backups the leader keeps at once,
	// those being written included.
	backupMaxInProgress = 4
	// backupDirName is the directory in the data directory that holds the
	// leader's backups while they are read.
	backupDirName = "backups"
)

// errTooManyBackups and errBackupsClosed are the store's refusals that the
// handler maps to wire errors (429 and 503).
var (
	errTooManyBackups = errors.New("too many backups in progress")
	errBackupsClosed  = errors.New("the node is stopping")
)

func (s *Service) handleBackup(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	var req schema.ClusterBackupRequest
	if e := decodeStrict(m.Data, &req); e != nil {
		return nil, e
	}
	// The tick orders the backup after everything committed before the
	// request arrived, and brings the state's lease clock up to now.
	if _, e := s.propose(&fsm.Expire{}, ""); e != nil {
		return nil, e
	}
	snap, applied, revision := s.sm.backupSnapshot()
	clusterID, err := readClusterID(s.cfg.DataDir)
	if err != nil {
		return nil, schema.Errorf(schema.ErrInternal, "%v", err)
	}
	created := time.Now().UTC()
	b, err := s.backups().create(func(w io.Writer) error {
		_, err := snap.WriteTo(w)
		return err
	})
	switch {
	case errors.Is(err, errTooManyBackups):
		return nil, schema.Errorf(schema.ErrLimitExceeded, "%d backups are in progress; try again when one is read to the end or after %s", backupMaxInProgress, backupIdleTimeout)
	case errors.Is(err, errBackupsClosed):
		return nil, schema.Errorf(schema.ErrUnavailable, "the node is stopping")
	case err != nil:
		s.log.Error("take a backup", "err", err)
		return nil, schema.Errorf(schema.ErrInternal, "take a backup: %v", err)
	}
	s.log.Info("took a backup", "id", b.id, "revision", revision, "applied_index", applied, "bytes", b.size)
	return &schema.ClusterBackupReply{
		ID: b.id, Size: b.size, SHA256: b.sha256,
		Revision: revision, AppliedIndex: applied,
		Format: fsm.SnapshotFormat, FormatVersion: fsm.SnapshotVersion,
		ClusterID: clusterID, Leader: s.cfg.NodeID, Created: created.Format(time.RFC3339Nano),
		MaxChunk: s.backupChunkMax(), IdleTimeoutMS: backupIdleTimeout.Milliseconds(),
	}, nil
}

func (s *Service) handleBackupChunk(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	var req schema.ClusterBackupChunkRequest
	if e := decodeStrict(m.Data, &req); e != nil {
		return nil, e
	}
	if !validBackupID(req.ID) {
		return nil, invalid("id must be a backup id of 16 lowercase hexadecimal digits, as cluster.backup returned it, not %q", shorten(req.ID))
	}
	if req.Offset < 0 {
		return nil, invalid("offset must be 0 or more, not %d", req.Offset)
	}
	if req.Length < 0 {
		return nil, invalid("length must be 0 or more, not %d", req.Length)
	}
	n := s.backupChunkMax()
	if req.Length > 0 && req.Length < n {
		n = req.Length
	}
	chunk, e := s.backups().read(req.ID, req.Offset, n)
	if e != nil {
		return nil, e
	}
	s.respondRaw(m, chunk.Header(), chunk.Data)
	return nil, nil
}

// respondRaw sends a success reply whose body is not JSON (the backup
// chunk), and then clears m.Reply: the worker's respond sends nothing for a
// message without a reply subject, so the request is answered once.
func (s *Service) respondRaw(m *nats.Msg, header nats.Header, body []byte) {
	if m.Reply == "" {
		return
	}
	if err := s.nc.PublishMsg(&nats.Msg{Subject: m.Reply, Header: header, Data: body}); err != nil {
		s.log.Debug("send reply", "subject", m.Subject, "err", err)
	}
	m.Reply = ""
}

// backupChunkMax is the most bytes a chunk reply carries on this node's
// connection.
func (s *Service) backupChunkMax() int {
	n := backupMaxChunk
	if room := int(s.maxPayload) - backupChunkHeadroom; room < n {
		n = room
	}
	return max(n, 1024)
}

// backupSnapshot takes the fsm snapshot together with the applied index and
// revision it holds, under the lock Apply takes, so the three agree.
func (m *stateMachine) backupSnapshot() (snap *fsm.Snapshot, applied uint64, revision int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state.Snapshot(), m.applied.get(), m.state.Revision()
}

// backups returns the node's backup store, made on first use and closed,
// with its files, when the service stops.
func (s *Service) backups() *backupStore {
	s.backupOnce.Do(func() {
		s.backupStore = newBackupStore(filepath.Join(s.cfg.DataDir, backupDirName), s.log)
		bs := s.backupStore
		context.AfterFunc(s.ctx, bs.close)
	})
	return s.backupStore
}

// backupStore keeps the backups a leader took until they are read, idle
// for too long, or the node stops. It is safe for concurrent use.
type backupStore struct {
	dir   string
	log   *slog.Logger
	idle  time.Duration // drop a backup unread this long
	grace time.Duration // drop a backup this long after its last chunk
	limit int           // backups kept at once, those being written included

	prepMu   sync.Mutex
	prepared bool

	mu      sync.Mutex
	files   map[string]*backupFile
	writing int
	closed  bool
}

// backupFile is one backup on disk.
type backupFile struct {
	id     string
	path   string
	size   int64
	sha256 string

	// Guarded by the store's mu: when to drop the backup, whether its last
	// chunk was read, and the timer that drops it.
	deadline time.Time
	done     bool
	timer    *time.Timer

	// mu is held for reading while a chunk is read, and for writing to
	// close and remove the file; f is nil once it is removed.
	mu sync.RWMutex
	f  *os.File
}

func newBackupStore(dir string, log *slog.Logger) *backupStore {
	return &backupStore{dir: dir, log: log, idle: backupIdleTimeout, grace: backupDoneGrace, limit: backupMaxInProgress, files: map[string]*backupFile{}}
}

// prepare creates the directory on first use and empties it: whatever is
// there was left by an earlier process (a crash), since this store has
// made nothing yet.
func (bs *backupStore) prepare() error {
	bs.prepMu.Lock()
	defer bs.prepMu.Unlock()
	if bs.prepared {
		return nil
	}
	if err := os.MkdirAll(bs.dir, 0o700); err != nil {
		return fmt.Errorf("create the backup directory: %w", err)
	}
	entries, err := os.ReadDir(bs.dir)
	if err != nil {
		return fmt.Errorf("read the backup directory: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(bs.dir, e.Name())); err != nil {
			return fmt.Errorf("remove an old backup: %w", err)
		}
	}
	bs.prepared = true
	return nil
}

// create writes a new backup with write and keeps it for reading. It fails
// with errTooManyBackups at the limit and errBackupsClosed once the store
// is closed.
func (bs *backupStore) create(write func(io.Writer) error) (*backupFile, error) {
	if err := bs.prepare(); err != nil {
		return nil, err
	}
	bs.mu.Lock()
	switch {
	case bs.closed:
		bs.mu.Unlock()
		return nil, errBackupsClosed
	case len(bs.files)+bs.writing >= bs.limit:
		bs.mu.Unlock()
		return nil, errTooManyBackups
	}
	bs.writing++
	bs.mu.Unlock()

	b, err := bs.writeFile(write)
	bs.mu.Lock()
	bs.writing--
	if err == nil && bs.closed {
		err = errBackupsClosed
	}
	if err != nil {
		bs.mu.Unlock()
		if b != nil {
			_ = b.remove()
		}
		return nil, err
	}
	bs.files[b.id] = b
	b.deadline = time.Now().Add(bs.idle)
	b.timer = time.AfterFunc(bs.idle, func() { bs.expire(b) })
	bs.mu.Unlock()
	return b, nil
}

// writeFile writes a backup file and returns it open for reading; on an
// error it returns the file, if any, for removal.
func (bs *backupStore) writeFile(write func(io.Writer) error) (*backupFile, error) {
	id, err := newBackupID()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(bs.dir, id+".backup")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create a backup file: %w", err)
	}
	b := &backupFile{id: id, path: path, f: f}
	h := sha256.New()
	cw := &byteCounter{w: io.MultiWriter(f, h)}
	if err := write(cw); err != nil {
		return b, fmt.Errorf("write backup %s: %w", id, err)
	}
	b.size, b.sha256 = cw.n, hex.EncodeToString(h.Sum(nil))
	return b, nil
}

// read returns up to n bytes of backup id from off, and keeps the backup
// for another idle period, or for the grace period once its end was read.
func (bs *backupStore) read(id string, off int64, n int) (*schema.ClusterBackupChunkReply, *schema.Error) {
	bs.mu.Lock()
	b := bs.files[id]
	if b == nil {
		bs.mu.Unlock()
		return nil, backupNotFound(id, bs.idle)
	}
	if off > b.size {
		bs.mu.Unlock()
		return nil, invalid("offset %d is past the end of backup %s, which has %d bytes", off, id, b.size)
	}
	end := min(b.size, off+int64(n))
	if end == b.size && !b.done {
		b.done = true
		b.timer.Reset(bs.grace) // brings the drop forward
	}
	wait := bs.idle
	if b.done {
		wait = bs.grace
	}
	b.deadline = time.Now().Add(wait)
	bs.mu.Unlock()

	data := make([]byte, end-off)
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.f == nil { // dropped meanwhile
		return nil, backupNotFound(id, bs.idle)
	}
	if got, err := b.f.ReadAt(data, off); got < len(data) {
		return nil, schema.Errorf(schema.ErrInternal, "read backup %s at %d: %v", id, off, err)
	}
	return &schema.ClusterBackupChunkReply{ID: id, Offset: off, Size: b.size, Data: data}, nil
}

func backupNotFound(id string, idle time.Duration) *schema.Error {
	return schema.Errorf(schema.ErrBackupNotFound, "backup %s not found: it was read to the end, went %s without a request, or was taken by an earlier leader; start a new backup", id, idle)
}

// expire runs on b's timer: it drops b if its deadline has passed, and
// otherwise waits for the deadline.
func (bs *backupStore) expire(b *backupFile) {
	bs.mu.Lock()
	if bs.files[b.id] != b {
		bs.mu.Unlock()
		return
	}
	if wait := time.Until(b.deadline); wait > 0 {
		b.timer.Reset(wait)
		bs.mu.Unlock()
		return
	}
	delete(bs.files, b.id)
	bs.mu.Unlock()
	if err := b.remove(); err != nil {
		bs.log.Warn("remove a backup", "id", b.id, "err", err)
	}
	bs.log.Debug("dropped a backup", "id", b.id, "read_to_the_end", b.done)
}

// close drops every backup and refuses new ones.
func (bs *backupStore) close() {
	bs.mu.Lock()
	bs.closed = true
	files := bs.files
	bs.files = map[string]*backupFile{}
	bs.mu.Unlock()
	for _, b := range files {
		b.timer.Stop()
		if err := b.remove(); err != nil {
			bs.log.Warn("remove a backup", "id", b.id, "err", err)
		}
	}
}

// held reports how many backups the store keeps (for tests).
func (bs *backupStore) held() int {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return len(bs.files)
}

// remove closes and deletes the file, once.
func (b *backupFile) remove() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.f == nil {
		return nil
	}
	err := b.f.Close()
	b.f = nil
	if rerr := os.Remove(b.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return fmt.Errorf("remove backup %s: %w", b.id, err)
	}
	return nil
}

// newBackupID makes a backup id: 8 random bytes in lowercase hex.
func newBackupID() (string, error) { return randomHexID("backup id") }

// validBackupID reports whether id has the shape newBackupID gives, which
// also keeps it a plain file name.
func validBackupID(id string) bool {
	return len(id) == 16 && isLowerHex(id)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// byteCounter counts the bytes written through it.
type byteCounter struct {
	w io.Writer
	n int64
}

func (c *byteCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// The backup file.

// BackupMagic starts the first line of every backup file, and the file's
// version follows it: "concord-backup v1".
const BackupMagic = "concord-backup"

// BackupFileVersion is the version of the backup file layout this build
// writes. It reads every version up to it, and a golden file of each
// version (tests/testdata) must keep restoring.
const BackupFileVersion = 1

// maxBackupHeaderLine bounds each header line, so a file that is not a
// backup is refused without reading all of it.
const maxBackupHeaderLine = 64 << 10

// Errors of reading and restoring backup files, to test with errors.Is.
var (
	// ErrBadBackup: the file is not a Concord backup, or it is truncated
	// or malformed.
	ErrBadBackup = errors.New("not a valid backup file")
	// ErrBackupChecksum: the payload's SHA-256 is not the one the header
	// records; the file is corrupt.
	ErrBackupChecksum = errors.New("backup checksum mismatch")
	// ErrUnsupportedBackup: the file or its payload has a version this
	// build cannot read (made by a newer Concord).
	ErrUnsupportedBackup = errors.New("unsupported backup version")
	// ErrDataDirNotEmpty: a restore was asked to write into a directory
	// that holds something.
	ErrDataDirNotEmpty = errors.New("data directory is not empty")
)

// BackupHeader is the second line of a backup file, one JSON object: what
// the payload after it is.
type BackupHeader struct {
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

// NewBackupHeader returns the header of a file holding the backup r
// describes.
func NewBackupHeader(r *schema.ClusterBackupReply) BackupHeader {
	return BackupHeader{
		Format: r.Format, FormatVersion: r.FormatVersion,
		Revision: r.Revision, AppliedIndex: r.AppliedIndex,
		ClusterID: r.ClusterID, Leader: r.Leader, Created: r.Created,
		Size: r.Size, SHA256: r.SHA256,
	}
}

// WriteBackupHeader writes the two header lines of a backup file; the
// payload follows them.
func WriteBackupHeader(w io.Writer, h BackupHeader) error {
	line, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("encode the backup header: %w", err)
	}
	if _, err := fmt.Fprintf(w, "%s v%d\n%s\n", BackupMagic, BackupFileVersion, line); err != nil {
		return fmt.Errorf("write the backup header: %w", err)
	}
	return nil
}

// ReadBackupHeader reads and checks the two header lines of a backup file,
// leaving r at the payload. It fails with ErrBadBackup or
// ErrUnsupportedBackup.
func ReadBackupHeader(r *bufio.Reader) (BackupHeader, error) {
	h, _, _, err := readBackupHeader(r)
	return h, err
}

// readBackupHeader is ReadBackupHeader that also returns the file's version
// and how many bytes the header took.
func readBackupHeader(r *bufio.Reader) (h BackupHeader, version int, size int64, err error) {
	fail := func(err error) (BackupHeader, int, int64, error) { return BackupHeader{}, 0, 0, err }
	magic, err := readHeaderLine(r)
	if err != nil {
		return fail(fmt.Errorf("%w: first line: %w", ErrBadBackup, err))
	}
	ver, ok := strings.CutPrefix(string(magic), BackupMagic+" v")
	n, err := strconv.Atoi(ver)
	if !ok || err != nil || n < 1 || strconv.Itoa(n) != ver {
		return fail(fmt.Errorf("%w: the first line is %.64q, not %q", ErrBadBackup, magic, fmt.Sprintf("%s v%d", BackupMagic, BackupFileVersion)))
	}
	if n > BackupFileVersion {
		return fail(fmt.Errorf("%w: the file is %s v%d; this build reads versions up to %d", ErrUnsupportedBackup, BackupMagic, n, BackupFileVersion))
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
		return fail(fmt.Errorf("%w: the payload's format is %q; this build reads %q", ErrUnsupportedBackup, h.Format, fsm.SnapshotFormat))
	case h.FormatVersion < 1 || h.FormatVersion > fsm.SnapshotVersion:
		return fail(fmt.Errorf("%w: the payload is %s version %d; this build reads versions 1 to %d", ErrUnsupportedBackup, h.Format, h.FormatVersion, fsm.SnapshotVersion))
	case h.Size < 1 || h.Revision < 0:
		return fail(fmt.Errorf("%w: header: size %d, revision %d", ErrBadBackup, h.Size, h.Revision))
	case len(h.SHA256) != sha256.Size*2 || !isLowerHex(h.SHA256):
		return fail(fmt.Errorf("%w: header: sha256 %q is not a SHA-256 in lowercase hex", ErrBadBackup, h.SHA256))
	}
	return h, n, int64(len(magic) + len(line) + 2), nil
}

// readHeaderLine reads one line of at most maxBackupHeaderLine bytes and
// returns it without its newline.
func readHeaderLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxBackupHeaderLine {
			return nil, fmt.Errorf("no end of line within %d bytes", maxBackupHeaderLine)
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

// BackupInfo is what VerifyBackup found in a backup file.
type BackupInfo struct {
	// FileVersion is the file's version (BackupFileVersion or older).
	FileVersion int
	Header      BackupHeader
	// Keys and Leases count the backup's keys and leases (anonymous
	// leases included).
	Keys   int
	Leases int64
}

// VerifyBackup checks a backup file completely: its header, the size and
// SHA-256 of its payload, and that the payload decodes into a state at the
// header's revision. It fails with ErrBadBackup, ErrBackupChecksum or
// ErrUnsupportedBackup when the file is not one this build can restore.
func VerifyBackup(path string) (*BackupInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open the backup: %w", err)
	}
	defer f.Close()
	info, _, err := verifyBackup(f)
	return info, err
}

// verifyBackup is VerifyBackup on an open file; it also returns where the
// payload starts.
func verifyBackup(f *os.File) (*BackupInfo, int64, error) {
	br := bufio.NewReaderSize(f, 1<<16)
	h, version, at, err := readBackupHeader(br)
	if err != nil {
		return nil, 0, err
	}
	sum := sha256.New()
	n, err := io.Copy(sum, io.LimitReader(br, h.Size))
	if err != nil {
		return nil, 0, fmt.Errorf("read the backup: %w", err)
	}
	if n < h.Size {
		return nil, 0, fmt.Errorf("%w: truncated: the payload has %d of the %d bytes the header records", ErrBadBackup, n, h.Size)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, 0, fmt.Errorf("%w: data after the payload's %d bytes", ErrBadBackup, h.Size)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.SHA256 {
		return nil, 0, fmt.Errorf("%w: the payload's SHA-256 is %s, the header records %s: the file is corrupt", ErrBackupChecksum, got, h.SHA256)
	}
	st := fsm.New()
	if err := st.Restore(io.NewSectionReader(f, at, h.Size)); err != nil {
		return nil, 0, fmt.Errorf("%w: the payload does not decode: %w", ErrBadBackup, err)
	}
	if st.Revision() != h.Revision {
		return nil, 0, fmt.Errorf("%w: the payload holds revision %d, the header records %d", ErrBadBackup, st.Revision(), h.Revision)
	}
	explicit, anonymous := st.LeaseCount()
	return &BackupInfo{FileVersion: version, Header: h, Keys: st.KeyCount(), Leases: explicit + anonymous}, at, nil
}

// RestoreOptions say where and as which node RestoreBackup seeds a new
// cluster. `concord serve` must then run with the same data directory,
// node id and Raft address.
type RestoreOptions struct {
	DataDir  string
	NodeID   string
	RaftAddr string
}

// RestoreResult describes a restored data directory.
type RestoreResult struct {
	BackupInfo
	DataDir  string
	NodeID   string
	RaftAddr string
	// ClusterID is the new cluster's id.
	ClusterID string
}

// The seed of a restored node's Raft state: a snapshot at index 1 in term
// 1 (where raft.BootstrapCluster puts its first entry).
const (
	seedIndex = 1
	seedTerm  = 1
)

// raftKeyCurrentTerm is the stable-store key under which hashicorp/raft
// keeps its current term (raft's unexported keyCurrentTerm; the on-disk
// name cannot change without breaking every existing data directory).
var raftKeyCurrentTerm = []byte("CurrentTerm")

// RestoreBackup verifies the backup file at path and seeds opts.DataDir
// with it, so that a node started there is the single member of a new
// cluster whose state is exactly the backup's (see the comment at the top
// of this file). The directory must be empty or absent, and nothing is
// written to it unless the whole file verifies; if writing fails part-way,
// what was written is removed. It fails with ErrDataDirNotEmpty, or with
// VerifyBackup's errors.
func RestoreBackup(path string, opts RestoreOptions) (*RestoreResult, error) {
	if err := subjects.ValidateNodeID(opts.NodeID); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if _, port, err := net.SplitHostPort(opts.RaftAddr); err != nil || port == "" {
		return nil, fmt.Errorf("restore: raft address %q is not host:port", opts.RaftAddr)
	}
	if opts.DataDir == "" {
		return nil, errors.New("restore: no data directory")
	}
	existed, err := checkEmptyDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open the backup: %w", err)
	}
	defer f.Close()
	info, at, err := verifyBackup(f)
	if err != nil {
		return nil, err
	}
	clusterID, err := newClusterID()
	if err != nil {
		return nil, err
	}
	if err := seedDataDir(opts, existed, clusterID, io.NewSectionReader(f, at, info.Header.Size), info.Header); err != nil {
		return nil, err
	}
	return &RestoreResult{BackupInfo: *info, DataDir: opts.DataDir, NodeID: opts.NodeID, RaftAddr: opts.RaftAddr, ClusterID: clusterID}, nil
}

// checkEmptyDir refuses a path that is not an empty directory, and reports
// whether it exists.
func checkEmptyDir(dir string) (existed bool, err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("restore: data directory: %w", err)
	case len(entries) > 0:
		what := strconv.Quote(entries[0].Name())
		if len(entries) > 1 {
			what += fmt.Sprintf(" and %d more", len(entries)-1)
		}
		return true, fmt.Errorf("%w: %s holds %s; restore into a new or empty directory", ErrDataDirNotEmpty, dir, what)
	}
	return true, nil
}

// seedDataDir writes the node id, the cluster id, Raft's current term and
// the seed snapshot holding payload. On an error it removes what it wrote.
func seedDataDir(opts RestoreOptions, existed bool, clusterID string, payload io.Reader, h BackupHeader) (err error) {
	dir := opts.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("restore: create the data directory: %w", err)
	}
	defer func() {
		if err == nil {
			return
		}
		if !existed {
			_ = os.RemoveAll(dir)
			return
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}()
	if err := checkNodeID(dir, opts.NodeID); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := writeClusterID(dir, clusterID); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	// The same store startRaft opens.
	store, err := logstore.Open(dir, logstore.Options{})
	if err != nil {
		return fmt.Errorf("restore: open the raft log: %w", err)
	}
	err = store.SetUint64(raftKeyCurrentTerm, seedTerm)
	if cerr := store.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("restore: set the raft term: %w", err)
	}
	if err := writeSeedSnapshot(dir, opts, payload, h); err != nil {
		return err
	}
	return syncDir(dir)
}

// writeSeedSnapshot writes the Raft snapshot that seeds the new cluster:
// index seedIndex, term seedTerm, the node alone as a voter, and the
// payload framed as fsmSnapshot.Persist frames it. It hashes the payload
// again as it copies it, so a file changed since it was verified is
// refused.
func writeSeedSnapshot(dir string, opts RestoreOptions, payload io.Reader, h BackupHeader) error {
	// The same store, with the same retention, as startRaft's.
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		return fmt.Errorf("restore: snapshot store: %w", err)
	}
	addr := raft.ServerAddress(opts.RaftAddr)
	// The transport only encodes the configuration's peers for the
	// snapshot's legacy peer list; nothing is sent.
	_, trans := raft.NewInmemTransport(addr)
	defer trans.Close()
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(opts.NodeID), Address: addr}}}
	sink, err := snaps.Create(raft.SnapshotVersionMax, seedIndex, seedTerm, conf, seedIndex, trans)
	if err != nil {
		return fmt.Errorf("restore: create the raft snapshot: %w", err)
	}
	var frame [8]byte
	binary.BigEndian.PutUint64(frame[:], seedIndex) // the applied index stateMachine.Restore reads
	sum := sha256.New()
	if err := copyPayload(sink, frame[:], payload, sum); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("restore: write the raft snapshot: %w", err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.SHA256 {
		_ = sink.Cancel()
		return fmt.Errorf("%w: the file changed while it was restored (SHA-256 %s, header %s)", ErrBackupChecksum, got, h.SHA256)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("restore: finish the raft snapshot: %w", err)
	}
	return nil
}

// copyPayload writes frame and then payload to w, hashing the payload.
func copyPayload(w io.Writer, frame []byte, payload io.Reader, sum hash.Hash) error {
	if _, err := w.Write(frame); err != nil {
		return err
	}
	_, err := io.Copy(io.MultiWriter(w, sum), payload)
	return err
}

// syncDir makes the directory's entries durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("restore: sync the data directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("restore: sync the data directory: %w", err)
	}
	return nil
}
