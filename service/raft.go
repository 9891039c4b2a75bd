package service

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/service/boltstore"
)

// ErrNodeIDMismatch reports a data directory that belongs to another node.
var ErrNodeIDMismatch = errors.New("data directory belongs to another node")

// checkNodeID records the node id in the data directory on first start and
// refuses a different one later: Raft knows this node by that id.
func checkNodeID(dir, id string) error {
	path := filepath.Join(dir, "node-id")
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
			return fmt.Errorf("record node id: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read node id: %w", err)
	}
	if got := string(bytes.TrimSpace(b)); got != id {
		return fmt.Errorf("%w: %s holds node %q, not %q", ErrNodeIDMismatch, dir, got, id)
	}
	return nil
}

// startRaft opens the stores, creates the transport and Raft, and
// bootstraps a single-voter cluster on first start.
func (s *Service) startRaft() error {
	dir := s.cfg.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if err := checkNodeID(dir, s.cfg.NodeID); err != nil {
		return err
	}
	store, err := boltstore.Open(filepath.Join(dir, "raft.db"))
	if err != nil {
		return err
	}
	s.store = store
	hlog := newRaftLogger(s.log.With("component", "raft"))
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hlog)
	if err != nil {
		return fmt.Errorf("snapshot store: %w", err)
	}
	addr, err := net.ResolveTCPAddr("tcp", s.cfg.RaftAddr)
	if err != nil {
		return fmt.Errorf("raft address %q: %w", s.cfg.RaftAddr, err)
	}
	advertise := net.Addr(addr)
	if addr.Port == 0 {
		advertise = nil // advertise the port the kernel picks
	}
	trans, err := raft.NewTCPTransportWithLogger(s.cfg.RaftAddr, advertise, 8, 10*time.Second, hlog)
	if err != nil {
		return fmt.Errorf("raft transport on %s: %w", s.cfg.RaftAddr, err)
	}
	s.trans = trans

	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(s.cfg.NodeID)
	conf.NotifyCh = s.notifyCh
	conf.Logger = hlog
	// Let concurrent proposals queue and go to disk together.
	conf.BatchApplyCh = true
	conf.MaxAppendEntries = 512
	conf.HeartbeatTimeout = 500 * time.Millisecond
	conf.ElectionTimeout = 500 * time.Millisecond
	conf.LeaderLeaseTimeout = 250 * time.Millisecond
	conf.NoLegacyTelemetry = true
	conf.SnapshotThreshold = s.cfg.SnapshotThreshold
	conf.SnapshotInterval = s.cfg.SnapshotInterval
	conf.TrailingLogs = s.cfg.TrailingLogs

	has, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return fmt.Errorf("inspect raft state: %w", err)
	}
	r, err := raft.NewRaft(conf, s.sm, store, store, snaps, trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	s.raft = r
	if !has {
		cfg := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: conf.LocalID, Address: trans.LocalAddr()}}}
		if err := r.BootstrapCluster(cfg).Error(); err != nil {
			return fmt.Errorf("bootstrap single-node cluster: %w", err)
		}
		s.log.Info("bootstrapped a new single-node cluster", "node", s.cfg.NodeID, "raft", trans.LocalAddr())
	}
	return nil
}
