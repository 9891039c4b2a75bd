// Package service runs a Concord node: the NATS connection (an embedded
// nats-server unless an external URL is given), Raft on a raft-wal log store,
// the leader-only request handlers, the lease clock and expiry ticker, and
// the watch publisher.
//
// Only the leader serves requests. On gaining leadership a node applies a
// barrier (so every entry of older terms is applied), starts the lease clock
// from the last applied entry's time, and only then subscribes; on losing
// it, it unsubscribes first. ARCHITECTURE.md at the top of the repository
// follows a request and an expiry through the files of this package and
// states the rules of time.
package service
