package serving

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
	"github.com/concord-io/concord/service/decode"
)

// Backups, the leader's side. The backup file and the offline restore,
// which need no node, are in package backupfile.
//
// Taking a backup (P.cluster.backup, leader only): the leader first commits
// a tick entry (an expire of no lease), stamped with its lease clock. That
// orders the backup after every write committed before the request, and
// makes the backup's lease clock the leader's "now", so every lease keeps
// exactly the time it had left when the backup was asked for. Then, under
// the state machine's lock, it takes the O(1) copy-on-write fsm snapshot
// together with the applied index and revision of that same moment, and
// writes its encoding (format concord.fsm, fsm.SnapshotVersion) to a file in
// <data-dir>/backups while hashing it. Apply goes on meanwhile.
//
// Reading it (P.cluster.backup.chunk): the client pulls the file one chunk
// per request, well below the NATS max payload. A pull keeps one chunk in
// flight, so core NATS never has to drop a reply to a slow consumer. The
// chunk reply's body is raw bytes with the Concord-Backup-* headers, not
// JSON (see schema.ClusterBackupChunkReply). The leader drops a backup
// backupDoneGrace after its last chunk was read (a retry of that chunk
// still works meanwhile), after backupIdleTimeout without a request, and
// when the node stops; it keeps at most BackupMaxInProgress at once. A
// backup lives on the leader that took it: after a leader change its chunks
// are "backup_not_found", and the client starts again.

// Backup limits.
const (
	// BackupMaxChunk is the most bytes one chunk reply carries, unless the
	// connection's max payload is smaller.
	BackupMaxChunk = 256 << 10
	// backupChunkHeadroom is kept free below the max payload for the
	// reply's subject and headers.
	backupChunkHeadroom = 8 << 10
	// backupIdleTimeout is how long a backup is kept without a chunk
	// request.
	backupIdleTimeout = time.Minute
	// backupDoneGrace is how long a backup is kept after its last chunk was
	// read, so that a retry of that chunk still finds it.
	backupDoneGrace = 10 * time.Second
	// BackupMaxInProgress is how many backups the leader keeps at once,
	// those being written included.
	BackupMaxInProgress = 4
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

func (s *Server) handleBackup(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	var req schema.ClusterBackupRequest
	if e := decode.Strict(m.Data, &req); e != nil {
		return nil, e
	}
	// The tick orders the backup after everything committed before the
	// request arrived, and brings the state's lease clock up to now.
	if _, e := s.Propose(&fsm.Expire{}, ""); e != nil {
		return nil, e
	}
	snap, applied, revision := s.sm.BackupSnapshot()
	clusterID, err := datadir.ReadClusterID(s.cfg.DataDir)
	if err != nil {
		return nil, schema.Errorf(schema.ErrInternal, "%v", err)
	}
	created := time.Now().UTC()
	b, err := s.backups().create(snap)
	switch {
	case errors.Is(err, errTooManyBackups):
		return nil, schema.Errorf(schema.ErrLimitExceeded, "%d backups are in progress; try again when one is read to the end or after %s", BackupMaxInProgress, backupIdleTimeout)
	case errors.Is(err, errBackupsClosed):
		return nil, schema.Errorf(schema.ErrUnavailable, "the node is stopping")
	case err != nil:
		s.cfg.Log.Error("take a backup", "err", err)
		return nil, schema.Errorf(schema.ErrInternal, "take a backup: %v", err)
	}
	s.cfg.Log.Info("took a backup", "id", b.id, "revision", revision, "applied_index", applied, "bytes", b.size)
	return &schema.ClusterBackupReply{
		ID: b.id, Size: b.size, SHA256: b.sha256,
		Revision: revision, AppliedIndex: applied,
		Format: fsm.SnapshotFormat, FormatVersion: fsm.SnapshotVersion,
		ClusterID: clusterID, Leader: s.cfg.NodeID, Created: created.Format(time.RFC3339Nano),
		MaxChunk: s.backupChunkMax(), IdleTimeoutMS: backupIdleTimeout.Milliseconds(),
	}, nil
}

func (s *Server) handleBackupChunk(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	req, e := s.cfg.Decoder.BackupChunk(m.Data)
	if e != nil {
		return nil, e
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
func (s *Server) respondRaw(m *nats.Msg, header nats.Header, body []byte) {
	if m.Reply == "" {
		return
	}
	if err := s.cfg.Conn.PublishMsg(&nats.Msg{Subject: m.Reply, Header: header, Data: body}); err != nil {
		s.cfg.Log.Debug("send reply", "subject", m.Subject, "err", err)
	}
	m.Reply = ""
}

// backupChunkMax is the most bytes a chunk reply carries on this node's
// connection.
func (s *Server) backupChunkMax() int {
	n := BackupMaxChunk
	if room := int(s.cfg.MaxPayload) - backupChunkHeadroom; room < n {
		n = room
	}
	return max(n, 1024)
}

// backups returns the node's backup store, made on first use and closed,
// with its files, when the service stops.
func (s *Server) backups() *backupStore {
	s.backupOnce.Do(func() {
		s.backupStore = newBackupStore(filepath.Join(s.cfg.DataDir, backupDirName), s.cfg.Log)
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
	return &backupStore{dir: dir, log: log, idle: backupIdleTimeout, grace: backupDoneGrace, limit: BackupMaxInProgress, files: map[string]*backupFile{}}
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

// create writes a new backup of src and keeps it for reading. It fails
// with errTooManyBackups at the limit and errBackupsClosed once the store
// is closed.
func (bs *backupStore) create(src io.WriterTo) (*backupFile, error) {
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

	b, err := bs.writeFile(src)
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

// writeFile writes src to a backup file and returns it open for reading;
// on an error it returns the file, if any, for removal.
func (bs *backupStore) writeFile(src io.WriterTo) (*backupFile, error) {
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
	n, err := src.WriteTo(io.MultiWriter(f, h))
	if err != nil {
		return b, fmt.Errorf("write backup %s: %w", id, err)
	}
	b.size, b.sha256 = n, hex.EncodeToString(h.Sum(nil))
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
		return nil, decode.Invalid("offset %d is past the end of backup %s, which has %d bytes", off, id, b.size)
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
func newBackupID() (string, error) { return datadir.RandomID("backup id") }
