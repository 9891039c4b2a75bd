package schema

// Member suffrage and node states as cluster replies spell them.
const (
	SuffrageVoter    = "voter"
	SuffrageNonvoter = "nonvoter"
)

// ClusterJoinRequest is the body of P.cluster.join: a starting node asks the
// leader to add it as a voter.
type ClusterJoinRequest struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	// ClusterID is the cluster the node belonged to before, if any; a node
	// of another cluster is refused.
	ClusterID string `json:"cluster_id,omitempty"`
}

// ClusterJoinReply answers P.cluster.join.
type ClusterJoinReply struct {
	ClusterID string   `json:"cluster_id"`
	Leader    string   `json:"leader"`
	Members   []Member `json:"members"`
}

// ClusterRemoveRequest is the body of P.cluster.remove.
type ClusterRemoveRequest struct {
	ID string `json:"id"`
}

// ClusterRemoveReply answers P.cluster.remove with the remaining members.
type ClusterRemoveReply struct {
	Members []Member `json:"members"`
}

// ClusterStatusRequest is the body of P.cluster.status.
type ClusterStatusRequest struct {
	// Hash asks every member for a hash of its state, so that replicas at
	// the same applied index can be compared.
	Hash bool `json:"hash,omitempty"`
}

// ClusterStatusReply answers P.cluster.status (served by the leader).
type ClusterStatusReply struct {
	ClusterID string `json:"cluster_id"`
	Leader    string `json:"leader"`
	Term      uint64 `json:"term"`
	Revision  int64  `json:"revision"`
	// CompactRevision is the history's floor: reads at revisions below it
	// and changes at or below it are gone.
	CompactRevision int64    `json:"compact_revision"`
	Members         []Member `json:"members"`
	// Conflict, when set, says that the leader sees another Concord
	// cluster serving the same subject prefix on the bus, naming both
	// cluster ids; while it lasts the cluster serves no requests.
	Conflict string `json:"conflict,omitempty"`
}

// Member is one server of the Raft configuration, with what it reported
// about itself; Reachable is false when it did not answer in time.
type Member struct {
	ID        string    `json:"id"`
	Address   string    `json:"address"`
	Suffrage  string    `json:"suffrage"`
	Reachable bool      `json:"reachable"`
	Node      *NodeInfo `json:"node,omitempty"`
}

// NodeInfoRequest is the body of P.cluster.node.<id>.info, which every node
// answers for itself, leader or not.
type NodeInfoRequest struct {
	Hash bool `json:"hash,omitempty"`
}

// NodeInfo is one node's own view.
type NodeInfo struct {
	ID string `json:"id"`
	// ClusterID is the cluster the node belongs to ("" before it joined).
	ClusterID string `json:"cluster_id"`
	// State is the node's Raft state in lower case, or NodeStateStarting.
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	Leader       string `json:"leader"`
	LastIndex    uint64 `json:"last_index"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Revision     int64  `json:"revision"`
	// StateHash is the SHA-256 of the node's state at AppliedIndex, when
	// asked for: replicas at the same index must agree.
	StateHash string `json:"state_hash,omitempty"`
	// Conflict, when set, says that the node sees another Concord cluster
	// serving the same subject prefix on the bus, naming both cluster ids;
	// while it lasts the cluster serves no requests.
	Conflict string `json:"conflict,omitempty"`
	// LogFormat is the newest log entry format the node's release reads
	// (fsm.LogFormat); 0 from releases that do not say, which read
	// single-command entries only.
	LogFormat int `json:"log_format,omitempty"`
	// Activity says what keeps the node from serving, while something
	// does: "restoring snapshot, 412 MB of 980 MB", "replaying log, entry
	// 5000 of 80000", "waiting for a leader". Empty when the node leads
	// and serves, or follows a leader with its log applied.
	Activity string `json:"activity,omitempty"`
}

// NodeStateStarting is the state a node reports before its Raft starts:
// while it checks the bus for other clusters, and while it restores its
// snapshot.
const NodeStateStarting = "starting"

// ClusterSnapshotRequest is the body of P.cluster.snapshot.
type ClusterSnapshotRequest struct{}

// ClusterSnapshotReply answers P.cluster.snapshot with the index the
// leader's newest snapshot covers.
type ClusterSnapshotReply struct {
	Index uint64 `json:"index"`
}
