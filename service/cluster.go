package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/bus"
	"github.com/concord-io/concord/service/datadir"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/service/serving"
	"github.com/concord-io/concord/subjects"
)

// The cluster RPCs: a joining node's request to be added (runJoin) and
// the leader's answer (handleJoin), remove, status and snapshot, which the
// leader serves, and node info, which every node serves for itself. The
// cluster id they carry is kept on disk (service/datadir).

// runJoin asks the leader, over the bus, to add this node as a voter, and
// retries until it is a member. A node of another cluster is refused, and
// the service fails.
func (s *Service) runJoin(ctx context.Context) {
	retry(ctx, 200*time.Millisecond, 2*time.Second, s.tryJoin)
}

// tryJoin asks once; it reports false when the join should be asked again.
func (s *Service) tryJoin() (done bool) {
	clusterID, err := datadir.ReadClusterID(s.cfg.DataDir)
	if err != nil {
		s.fail(err)
		return true
	}
	// A member that has no cluster id yet (the join's reply was lost
	// before it was recorded) still asks: the reply carries the id.
	if servers, err := s.raftMembers(); err == nil && isMember(servers, s.cfg.NodeID) && clusterID != "" {
		return true
	}
	req, _ := json.Marshal(schema.ClusterJoinRequest{ID: s.cfg.NodeID, Address: string(s.trans.LocalAddr()), ClusterID: clusterID})
	msg, err := s.nc.Request(s.names.Request(subjects.ClusterJoin), req, 5*time.Second)
	if err != nil {
		s.log.Debug("join: no leader answered yet; retrying", "err", err)
		return false
	}
	if e := bus.ParseErrorReply(msg); e != nil {
		if e.Name == schema.ErrClusterMismatch {
			s.fail(fmt.Errorf("%w: %s", ErrForeignCluster, e.Description))
			return true
		}
		if !e.Retryable() {
			s.fail(fmt.Errorf("join refused: %w", e))
			return true
		}
		return false
	}
	var reply schema.ClusterJoinReply
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return false
	}
	if clusterID == "" {
		if err := datadir.WriteClusterID(s.cfg.DataDir, reply.ClusterID); err != nil {
			s.fail(err)
			return true
		}
	}
	s.log.Info("joined the cluster", "cluster_id", reply.ClusterID, "leader", reply.Leader)
	return true
}

// isMember reports whether node id is one of servers.
func isMember(servers []raft.Server, id string) bool {
	return slices.ContainsFunc(servers, func(srv raft.Server) bool { return srv.ID == raft.ServerID(id) })
}

func (s *Service) handleJoin(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	req, e := s.dec.Join(m.Data)
	if e != nil {
		return nil, e
	}
	ours, err := datadir.ReadClusterID(s.cfg.DataDir)
	if err != nil {
		return nil, schema.Errorf(schema.ErrInternal, "%v", err)
	}
	if req.ClusterID != "" && req.ClusterID != ours {
		return nil, schema.Errorf(schema.ErrClusterMismatch, "node %s belongs to cluster %s, not to this cluster %s; give it an empty data directory to join", req.ID, req.ClusterID, ours)
	}
	// A member asks again only when it lost its data or its join reply:
	// it may come back on another release, so it is asked too.
	if e := s.formats.CheckJoiner(req.ID); e != nil {
		s.log.Warn("refused a join", "node", req.ID, "err", e.Description)
		return nil, e
	}
	if servers, err := s.raftMembers(); err != nil || !hasVoter(servers, req.ID, req.Address) {
		// Open a Raft connection to the joiner first: a node that cannot
		// be reached, or whose certificate the CA did not sign, would
		// otherwise become a voter that never receives the log and counts
		// against the quorum until someone removes it.
		if err := s.probeRaft(req.Address); err != nil {
			s.log.Warn("refused a join: its Raft address is not reachable", "node", req.ID, "raft", req.Address, "err", err)
			return nil, schema.Errorf(schema.ErrUnavailable, "the leader cannot open a Raft connection to %s (check the address, the network and the Raft TLS certificates): %v", req.Address, err)
		}
		if err := s.raft.AddVoter(raft.ServerID(req.ID), raft.ServerAddress(req.Address), 0, s.cfg.ApplyTimeout).Error(); err != nil {
			return nil, serving.RaftError(err)
		}
		s.log.Info("added a voter", "node", req.ID, "raft", req.Address)
	}
	members, e := s.members(false)
	if e != nil {
		return nil, e
	}
	return &schema.ClusterJoinReply{ClusterID: ours, Leader: s.cfg.NodeID, Members: members}, nil
}

// joinProbeTimeout bounds the leader's test connection to a joiner.
const joinProbeTimeout = 5 * time.Second

// joinProbeListen is how long the probe waits for the joiner to refuse the
// connection after the handshake.
const joinProbeListen = 300 * time.Millisecond

// probeRaft dials addr on the Raft stream layer (completing the TLS
// handshake when Raft runs over TLS), then listens briefly: in TLS 1.3 the
// client's handshake ends before the server has checked the client's
// certificate, so a joiner that distrusts ours answers only with an alert.
// A Raft peer sends nothing unasked, so silence until the deadline means the
// stream is usable; an alert or EOF means it is not. The peer's transport
// sees an empty stream and drops it quietly.
func (s *Service) probeRaft(addr string) error {
	c, err := s.raftLayer.Dial(raft.ServerAddress(addr), joinProbeTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetReadDeadline(time.Now().Add(joinProbeListen)); err != nil {
		return err
	}
	var b [1]byte
	_, err = c.Read(b[:])
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err == nil {
		return errors.New("the peer spoke first, which a Raft peer never does")
	}
	return err
}

// hasVoter reports whether node id is one of servers, a voter at addr.
func hasVoter(servers []raft.Server, id, addr string) bool {
	return slices.ContainsFunc(servers, func(srv raft.Server) bool {
		return srv.ID == raft.ServerID(id) && srv.Address == raft.ServerAddress(addr) && srv.Suffrage == raft.Voter
	})
}

func (s *Service) handleRemove(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	req, e := s.dec.Remove(m.Data)
	if e != nil {
		return nil, e
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, serving.RaftError(err)
	}
	found := false
	for _, srv := range f.Configuration().Servers {
		found = found || srv.ID == raft.ServerID(req.ID)
	}
	if !found {
		return nil, schema.Errorf(schema.ErrNodeNotFound, "node %s is not a member", req.ID)
	}
	if err := s.raft.RemoveServer(raft.ServerID(req.ID), 0, s.cfg.ApplyTimeout).Error(); err != nil {
		return nil, serving.RaftError(err)
	}
	s.log.Info("removed a member", "node", req.ID)
	members, e := s.members(false)
	if e != nil {
		return nil, e
	}
	return &schema.ClusterRemoveReply{Members: members}, nil
}

func (s *Service) handleStatus(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	var req schema.ClusterStatusRequest
	if e := decode.Strict(m.Data, &req); e != nil {
		return nil, e
	}
	members, e := s.members(req.Hash)
	if e != nil {
		return nil, e
	}
	id, err := datadir.ReadClusterID(s.cfg.DataDir)
	if err != nil {
		return nil, schema.Errorf(schema.ErrInternal, "%v", err)
	}
	var rev, floor int64
	s.sm.Read(func(st *fsm.State) { rev, floor = st.Revision(), st.CompactRevision() })
	reply := &schema.ClusterStatusReply{ClusterID: id, Leader: s.cfg.NodeID, Term: s.raft.CurrentTerm(), Revision: rev, CompactRevision: floor, Members: members}
	if c := s.fence.Load(); c != nil {
		reply.Conflict = c.String()
	}
	return reply, nil
}

func (s *Service) handleSnapshot(_ context.Context, m *nats.Msg) (any, *schema.Error) {
	var req schema.ClusterSnapshotRequest
	if e := decode.Strict(m.Data, &req); e != nil {
		return nil, e
	}
	f := s.raft.Snapshot()
	if err := f.Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil, schema.Errorf(schema.ErrUnavailable, "snapshot: %v", err)
	}
	snaps, err := s.snaps.List()
	if err != nil || len(snaps) == 0 {
		return nil, schema.Errorf(schema.ErrInternal, "list snapshots: %v", err)
	}
	return &schema.ClusterSnapshotReply{Index: snaps[0].Index}, nil
}

// members lists the Raft configuration with each member's own report,
// gathered in parallel over the bus.
func (s *Service) members(withHash bool) ([]schema.Member, *schema.Error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, serving.RaftError(err)
	}
	servers := f.Configuration().Servers
	out := make([]schema.Member, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		out[i] = schema.Member{ID: string(srv.ID), Address: string(srv.Address), Suffrage: suffrage(srv.Suffrage)}
		wg.Add(1)
		go func(mb *schema.Member) {
			defer wg.Done()
			if info, err := s.prober.AskNode(mb.ID, schema.NodeInfoRequest{Hash: withHash}, time.Second); err == nil {
				mb.Reachable, mb.Node = true, info
			}
		}(&out[i])
	}
	wg.Wait()
	return out, nil
}

func suffrage(s raft.ServerSuffrage) string {
	if s == raft.Voter {
		return schema.SuffrageVoter
	}
	return schema.SuffrageNonvoter
}

// serveNodeInfoSubjects makes this node answer for itself, leader or not,
// on P.cluster.node.<id>.info and P.cluster.nodes. A bootstrapping node
// starts answering before its Raft starts (checkBootstrap); every other node
// once Raft runs.
func (s *Service) serveNodeInfoSubjects() error {
	if s.nodeInfoSubscribed {
		return nil
	}
	for _, subject := range []string{s.names.NodeInfo(s.cfg.NodeID), s.names.Nodes()} {
		if _, err := s.nc.Subscribe(subject, s.serveNodeInfo); err != nil {
			return fmt.Errorf("subscribe %s: %w", subject, err)
		}
	}
	s.nodeInfoSubscribed = true
	// The server has the interest before anyone is told this node exists.
	return s.nc.Flush()
}

// serveNodeInfo answers P.cluster.node.<id>.info and P.cluster.nodes on
// every node.
func (s *Service) serveNodeInfo(m *nats.Msg) {
	if m.Reply == "" || s.prober.OwnProbe(m.Reply) || !s.srv.ReplyAllowed(m) {
		return // nowhere to answer, this node's own bootstrap probe, or a refused reply subject
	}
	var req schema.NodeInfoRequest
	if e := decode.Strict(m.Data, &req); e != nil {
		s.srv.Respond(m, nil, e)
		return
	}
	clusterID, _ := datadir.ReadClusterID(s.cfg.DataDir)
	info := schema.NodeInfo{ID: s.cfg.NodeID, ClusterID: clusterID, State: schema.NodeStateStarting, LogFormat: fsm.LogFormat}
	if s.raftStarted.Load() {
		_, leader := s.raft.LeaderWithID()
		info.State = strings.ToLower(s.raft.State().String())
		info.Term = s.raft.CurrentTerm()
		info.Leader = string(leader)
		info.LastIndex = s.raft.LastIndex()
		info.CommitIndex = s.raft.CommitIndex()
	}
	info.AppliedIndex, info.Revision, info.StateHash = s.sm.Digest(req.Hash)
	if c := s.fence.Load(); c != nil {
		info.Conflict = c.String()
	}
	info.Activity = s.activity()
	s.srv.Respond(m, &info, nil)
}
