// Package serving answers the request subjects while its node leads. A
// request comes in through the nats micro service (micro.go), goes to a
// worker (dispatch.go), passes the node's fences (a bus conflict, a full
// disk, its deadline), and reaches its handler in the endpoint table
// (handlers.go): a write is decoded and proposed (proposer.go, which
// batches concurrent commands into one log entry), a read is decoded and
// answered from the state once the read barrier allows (readbarrier.go).
// The reply goes back only to a subject a reply may go to (replyguard.go,
// reply.go), and every request is counted once for both micro's STATS and
// Prometheus (requeststats.go). Backups (backup.go) are kept here while
// they are read.
//
// The server sees its node only through Node and State, which it declares:
// the lease clock, Raft, the format and conflict gates, and the state.
package serving
