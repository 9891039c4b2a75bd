// Package backupfile is Concord's backup file and its offline tools: the
// file format (Header, WriteHeader, ReadHeader), its verification
// (Verify), and the restore that seeds a data directory from it
// (Restore). It runs without a node: `concord snapshot save|status|restore`
// use it with the client alone, the way etcd keeps its offline snapshot
// tool apart from the server. How a leader takes a backup and serves it in
// chunks is in package service (backup.go).
//
// The file (`concord snapshot save`): a magic line with the file version,
// one line of JSON (Header: payload format and version, revision, applied
// index, where and when it was taken, size and SHA-256 of the payload),
// then the payload, byte for byte as the leader wrote it: the state in the
// fsm snapshot format (fsm.SnapshotFormat: binary since version 5, JSON
// lines before).
//
// Restoring (Restore, `concord snapshot restore`) seeds an empty data
// directory so that `concord serve` starts a NEW single-node cluster whose
// state is exactly the backup's. It writes what raft.BootstrapCluster would,
// except that the first entry is a snapshot instead of a log entry: the
// stable store's current term is 1, and the snapshot store holds one Raft
// snapshot at index 1, term 1, whose configuration is the new node alone, as
// a voter. Its data is the backup's payload framed as the node's
// fsmSnapshot.Persist frames it (the applied index, 1, then the fsm
// snapshot). This is the state raft.RecoverCluster leaves behind (a
// snapshot that carries the configuration, and no log), which
// RecoverCluster itself cannot produce from nothing. On start, Raft
// restores the snapshot into the state machine, takes the configuration
// from it, and elects the node in term 2; the first new entry is index 2.
// Nodes that join with --join get the state by a snapshot install, since
// the log holds nothing before index 2. The fsm snapshot carries the lease
// clock with the lease deadlines, and a new leader resumes the clock from
// the state's time, so leases keep their remaining time; the revision
// counter, the lease id counter, the idempotency cache and the change log
// are in the snapshot too. The data directory gets a new cluster id, so the
// restored cluster never mixes with the one the backup came from.
package backupfile
