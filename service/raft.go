package service

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/service/datadir"
	"github.com/concord-io/concord/service/logstore"
	"github.com/concord-io/concord/service/replica"
)

// ErrNodeIDMismatch reports a data directory that belongs to another node.
var ErrNodeIDMismatch = datadir.ErrNodeIDMismatch

// logCacheSize is how many recent log entries Raft keeps in memory, so
// that replication and apply of what was just written do not read the
// disk, and no more, since an entry may hold a value of up to
// --max-value-bytes.
const logCacheSize = 512

// maxAppendEntries bounds the entries of one append request and one apply
// batch. Raft allocates a slice of this many pointers each time the commit
// index moves (processLogs), on every node: at 512 that was 4 KiB for the
// one batch entry the proposer keeps in flight, a ninth of all the bytes a
// node allocated under puts. Raft's default of 64 still moves 64 batch
// entries of up to maxBatchCommands commands each per request.
const maxAppendEntries = 64

// startRaft opens the stores, creates the transport and Raft, and then
// either bootstraps a new cluster (first start, unless joining), or starts
// asking the cluster on the bus to add this node (joining).
func (s *Service) startRaft() error {
	dir := s.cfg.DataDir
	if err := datadir.Create(dir); err != nil {
		return err
	}
	if err := datadir.CheckNodeID(dir, s.cfg.NodeID); err != nil {
		return err
	}
	hlog := replica.NewRaftLogger(s.log.With("component", "raft"))
	s.phase.Store(int32(phaseOpeningLog))
	// Migrates a data directory of an older release on its first start.
	store, err := logstore.Open(dir, logstore.Options{Logger: hlog, Metrics: s.metrics.WAL(), SegmentBytes: s.cfg.WALSegmentMB << 20, OnDiskFull: s.onDiskFull})
	if errors.Is(err, logstore.ErrDiskFull) {
		return fmt.Errorf("%w; a smaller --wal-segment-mb needs less room (two segments and an eighth)", err)
	}
	if err != nil {
		return err
	}
	s.store = store
	torn, err := datadir.RemoveTornSnapshots(dir)
	for _, p := range torn {
		s.log.Warn("removed a snapshot that a crash left half-written", "path", p)
	}
	if err != nil {
		return err
	}
	snaps, err := datadir.OpenSnapshotStore(dir, hlog)
	if err != nil {
		return err
	}
	s.snaps = snaps
	if err := checkLogCovered(dir, store, snaps); err != nil {
		return err
	}
	stream, err := replica.NewStreamLayer(s.cfg.RaftAddr)
	if err != nil {
		return err
	}
	if s.cfg.TestFaultFile != "" {
		// Before any connection: the hook tracks them all.
		stream.EnableTestFaults(s.cfg.TestFaultFile, s.log, s.ctx.Done())
	}
	// With RaftTLS, Raft's streams run over mutual TLS on top of the TCP
	// layer; the fault switch still acts on the TCP layer underneath.
	var layer raft.StreamLayer = stream
	if s.cfg.RaftTLS.Enabled() {
		tl, err := replica.NewTLSStreamLayer(stream, s.cfg.RaftTLS, s.log.With("component", "raft-tls"))
		if err != nil {
			stream.Close()
			return err
		}
		layer = tl
	}
	s.raftLayer = layer
	s.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: layer, MaxPool: 8, Timeout: 10 * time.Second, Logger: hlog,
	})

	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(s.cfg.NodeID)
	conf.NotifyCh = s.notifyCh
	conf.Logger = hlog
	// Let concurrent proposals queue and go to disk together.
	conf.BatchApplyCh = true
	conf.MaxAppendEntries = maxAppendEntries
	conf.HeartbeatTimeout = s.cfg.RaftHeartbeatTimeout
	conf.ElectionTimeout = s.cfg.RaftElectionTimeout
	conf.LeaderLeaseTimeout = s.cfg.RaftLeaderLeaseTimeout
	conf.NoLegacyTelemetry = true
	conf.SnapshotThreshold = s.cfg.SnapshotThreshold
	conf.SnapshotInterval = s.cfg.SnapshotInterval
	conf.TrailingLogs = s.cfg.TrailingLogs

	has, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		return fmt.Errorf("inspect raft state: %w", err)
	}
	bootstrap := !has && !s.cfg.Join
	ours, err := datadir.ReadClusterID(dir)
	if err != nil {
		return err
	}
	// A node with state but no cluster id is either a standalone node from
	// before cluster ids, which gets one once Raft shows it is alone, or a
	// member that lost the file (see adoptLegacyClusterID).
	legacy := has && ours == "" && !s.cfg.Join
	// Before Raft starts: refuse a bus that serves another cluster, and
	// bootstrap only on positive evidence that none does (service/bus).
	s.phase.Store(int32(phaseCheckingBus))
	switch {
	case bootstrap:
		if err := s.checkBootstrap(); err != nil {
			return err
		}
		// The cluster id is on disk before Raft starts, so that this node
		// answers with it from the moment its Raft could lead.
		id, err := datadir.NewClusterID()
		if err != nil {
			return err
		}
		if err := datadir.WriteClusterID(dir, id); err != nil {
			return err
		}
	case ours != "":
		if err := s.guard.CheckRestart(s.ctx, ours); err != nil {
			return err
		}
	}
	// Raft applies again, at start, what the log held when it stopped;
	// telemetry counts only what comes after.
	last, err := store.LastIndex()
	if err != nil {
		return fmt.Errorf("read the raft log: %w", err)
	}
	s.sm.CountFrom = last
	s.lastAtStart = last
	// A restarting node answers for itself on the bus from here, with what
	// it is doing: restoring its snapshot can take a while, and meanwhile
	// `concord status` shows it. It answers as starting, with its cluster
	// id, so another node's bootstrap sees a cluster here (service/bus).
	// A bootstrapping node answers already; a joining node only once its
	// Raft runs (below), since a node starting without a cluster stops a
	// bootstrap that hears it.
	if has {
		if err := s.serveNodeInfoSubjects(); err != nil {
			return err
		}
	}
	s.phase.Store(int32(phaseStartingRaft))
	// Recent entries stay in memory: the leader reads each entry back to
	// send it to the followers, and every node reads it again to apply it;
	// without the cache each of those is a read from the segment file.
	logs, err := raft.NewLogCache(logCacheSize, store)
	if err != nil {
		return fmt.Errorf("raft log cache: %w", err)
	}
	// Raft restores the newest snapshot inside NewRaft; replica.FSM and
	// replica.SizedSnapshots report how far it has read.
	r, err := raft.NewRaft(conf, replica.FSM{StateMachine: s.sm, Progress: &s.restore, Pause: s.pause}, logs, store, replica.SizedSnapshots{SnapshotStore: snaps, Progress: &s.restore}, s.trans)
	if err != nil {
		return fmt.Errorf("start raft: %w", err)
	}
	s.applied = replica.AppliedWaiter{Applied: &s.sm.Applied, Log: store}
	s.replayFrom = s.sm.Applied.Get()
	s.raft = r
	// Before anything can make it leader.
	s.goRun(s.metrics.CountLeaderChanges(r))
	s.phase.Store(int32(phaseRaft))
	s.raftStarted.Store(true)
	if err := s.serveNodeInfoSubjects(); err != nil {
		return err
	}
	if legacy {
		if err := s.adoptLegacyClusterID(); err != nil {
			return err
		}
	}
	switch {
	case bootstrap:
		id, err := datadir.ReadClusterID(dir)
		if err != nil {
			return err
		}
		cfg := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: conf.LocalID, Address: s.trans.LocalAddr()}}}
		if err := r.BootstrapCluster(cfg).Error(); err != nil {
			return fmt.Errorf("bootstrap a new cluster: %w", err)
		}
		s.log.Info("bootstrapped a new cluster", "cluster_id", id, "node", s.cfg.NodeID, "raft", s.trans.LocalAddr())
		s.electIfAlone()
	case s.cfg.Join:
		s.goRun(s.runJoin)
	default:
		s.electIfAlone()
	}
	return nil
}

// electIfAlone makes a node that is the only voter of its configuration
// stand for election now rather than after a heartbeat timeout. A starting
// follower waits a random 1 to 2 heartbeat timeouts (0.5 to 1 s by
// default) before it stands, in case a leader is about to contact it; a
// lone voter has no leader to hear from, so for a single node that wait is
// all of its election and a large share of a restart. Standing at once is
// what Raft would do after the wait, only sooner: an election is always
// safe, and a configuration of one voter elects that voter.
//
// hashicorp/raft has no call to start an election; lowering the heartbeat
// timeout with ReloadConfig makes a follower check for a leader at once,
// and having heard from none since it started, it stands. The timeout is
// set back straight away: the check already runs, and the configured
// timeout holds for any later term (a node that joins makes this one a
// member of a larger cluster).
func (s *Service) electIfAlone() {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		s.log.Warn("read the raft configuration", "err", err)
		return
	}
	voters, self := 0, false
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			voters++
			self = self || srv.ID == raft.ServerID(s.cfg.NodeID)
		}
	}
	if voters != 1 || !self {
		return
	}
	rc := s.raft.ReloadableConfig()
	// Raft refuses a heartbeat timeout below the leader lease timeout.
	if s.cfg.RaftLeaderLeaseTimeout >= rc.HeartbeatTimeout {
		return
	}
	short := rc
	short.HeartbeatTimeout = s.cfg.RaftLeaderLeaseTimeout
	if err := s.raft.ReloadConfig(short); err != nil {
		s.log.Warn("stand for election at once", "err", err)
		return
	}
	if err := s.raft.ReloadConfig(rc); err != nil {
		s.log.Warn("set the heartbeat timeout back", "err", err)
	}
}

// ErrNoClusterID reports a member of a cluster of several nodes whose data
// directory has lost its cluster-id file.
var ErrNoClusterID = errors.New("cluster id missing")

// adoptLegacyClusterID gives a cluster id to a node that has Raft state but
// none. A standalone node from before cluster ids is alone in its Raft
// configuration and gets a new one. A member of a larger configuration
// must not make one up: every other member would then be another cluster
// to it (and it to them), and the bus watch would stop them all. It
// refuses to start instead, and the operator copies the file back.
func (s *Service) adoptLegacyClusterID() error {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("read the raft configuration: %w", err)
	}
	servers := f.Configuration().Servers
	if len(servers) > 1 {
		return fmt.Errorf("%w: %s has Raft state of a cluster of %d members but no %s file; copy that file from another member's data directory (it holds the cluster id), then start the node again",
			ErrNoClusterID, s.cfg.DataDir, len(servers), datadir.ClusterIDFile)
	}
	id, err := datadir.NewClusterID()
	if err != nil {
		return err
	}
	return datadir.WriteClusterID(s.cfg.DataDir, id)
}

// checkLogCovered refuses a log compacted past every readable snapshot
// (datadir.CheckLogCovered), which raft.NewRaft would meet with a panic.
func checkLogCovered(dir string, logs raft.LogStore, snaps raft.SnapshotStore) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("read the log's first index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("read the log's last index: %w", err)
	}
	return datadir.CheckLogCovered(dir, snaps, first, last)
}
