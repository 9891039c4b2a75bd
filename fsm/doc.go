// Package fsm is Concord's deterministic state machine: the revisioned
// key-value store, the lease table, the counters, and the snapshot format.
//
// Apply is a pure function of the state and the log entry: it reads no
// clock, draws no random numbers, does no I/O and knows nothing of NATS or
// Raft. Time enters only as data: every command carries the lease-clock value
// the leader stamped on it, and Apply uses max(stamped, last applied) so the
// clock never runs backwards. Two States fed the same commands end
// byte-identical, which the tests check by comparing snapshots.
//
// Errors that depend on state (unknown lease, conflicts, limits) are decided
// here so every replica decides the same; a command that fails changes
// nothing but the lease clock, which every entry advances, failed or not,
// because the stamp is the leader's reading of time, not part of the request. Validation that needs no state (key syntax, sizes) belongs to the
// caller and must happen before a command is proposed.
//
// A log entry holds one command, or a batch of commands (EncodeBatch) that
// ApplyEntry applies one by one, in order, exactly as if each were its own
// entry, with a result each.
//
// A State is not safe for concurrent use; the caller serialises Apply and
// guards reads.
package fsm
