// Package replica is what sits behind Raft on a node: the state machine
// adapter that puts fsm.State behind raft.BatchingFSM (the lock that lets
// readers in while Raft applies, the applied index and waiting for it,
// views for long reads, snapshots and a restore's progress), Raft's TCP and
// mutual-TLS stream layers, the bridge from Raft's hclog to slog, and the
// snapshot trigger that bounds a restart's replay. It also holds the
// test-only hooks that act on those layers (a Raft link fault switch and a
// pause switch), which stay off unless a test turns them on.
//
// It knows nothing of NATS or of serving requests: the node wires it in
// with plain values and callbacks (StateMachine's OnResult, OnSnapshot and
// SnapshotVersion).
package replica
