package backupfile

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/hashicorp/go-hclog"
	"hash"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/service/datadir"
	"github.com/concord-io/concord/service/logstore"
	"github.com/concord-io/concord/subjects"
)

// RestoreOptions say where and as which node Restore seeds a new cluster.
// `concord serve` must then run with the same data directory, node id and
// Raft address.
type RestoreOptions struct {
	DataDir  string
	NodeID   string
	RaftAddr string
	// Progress, when set, hears how far each pass over the payload is.
	Progress Progress
}

// Progress hears the passes a restore makes over a backup's payload
// (checking its SHA-256, decoding it, writing it into the data
// directory): Begin with the pass's name and the payload's size, then the
// bytes read as they go, then End.
type Progress interface {
	Begin(pass string, total int64)
	Add(n int64)
	End()
}

// progressReader counts what is read through it on p.
type progressReader struct {
	r io.Reader
	p Progress
}

func (pr progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	pr.p.Add(int64(n))
	return n, err
}

// pass reads r as a pass named pass of total bytes on p, when p is set.
func pass(p Progress, name string, total int64, r io.Reader) (io.Reader, func()) {
	if p == nil {
		return r, func() {}
	}
	p.Begin(name, total)
	return progressReader{r, p}, p.End
}

// RestoreResult describes a restored data directory.
type RestoreResult struct {
	Info
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

// Restore verifies the backup file at path and seeds opts.DataDir with it,
// so that a node started there is the single member of a new cluster whose
// state is exactly the backup's (see the package comment). The directory
// must be empty or absent, and nothing is written to it unless the whole
// file verifies; if writing fails part-way, what was written is removed.
// It fails with ErrDataDirNotEmpty, or with Verify's errors.
func Restore(path string, opts RestoreOptions) (*RestoreResult, error) {
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
	info, at, err := verify(f, opts.Progress)
	if err != nil {
		return nil, err
	}
	clusterID, err := datadir.NewClusterID()
	if err != nil {
		return nil, err
	}
	payload, end := pass(opts.Progress, "writing", info.Header.Size, io.NewSectionReader(f, at, info.Header.Size))
	err = seedDataDir(opts, existed, clusterID, payload, info.Header)
	end()
	if err != nil {
		return nil, err
	}
	return &RestoreResult{Info: *info, DataDir: opts.DataDir, NodeID: opts.NodeID, RaftAddr: opts.RaftAddr, ClusterID: clusterID}, nil
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
func seedDataDir(opts RestoreOptions, existed bool, clusterID string, payload io.Reader, h Header) (err error) {
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
	if err := datadir.CheckNodeID(dir, opts.NodeID); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := datadir.WriteClusterID(dir, clusterID); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	// The same store the node opens.
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
// payload framed as every node snapshot is (datadir.WriteSnapshotFrame). It hashes
// the payload again as it copies it, so a file changed since it was
// verified is refused.
func writeSeedSnapshot(dir string, opts RestoreOptions, payload io.Reader, h Header) error {
	// The same store, with the same retention, as the node's.
	snaps, err := datadir.OpenSnapshotStore(dir, hclog.NewNullLogger())
	if err != nil {
		return fmt.Errorf("restore: %w", err)
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
	sum := sha256.New()
	if err := copyPayload(sink, seedIndex, payload, sum); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("restore: write the raft snapshot: %w", err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != h.SHA256 {
		_ = sink.Cancel()
		return fmt.Errorf("%w: the file changed while it was restored (SHA-256 %s, header %s)", ErrChecksum, got, h.SHA256)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("restore: finish the raft snapshot: %w", err)
	}
	return nil
}

// copyPayload writes the snapshot frame with the applied index and then
// payload to w, hashing the payload.
func copyPayload(w io.Writer, applied uint64, payload io.Reader, sum hash.Hash) error {
	if _, err := datadir.WriteSnapshotFrame(w, applied); err != nil {
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
