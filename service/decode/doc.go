// Package decode turns a request's body and headers into what a node acts
// on: an fsm command or read query, the idempotency key, the deadline. It
// checks everything that does not depend on state, under the limits it is
// given as a value, and describes every bad request in a sentence a user
// of any language can act on. It knows nothing of the node, Raft or NATS
// connections, so a request it refuses changes nothing, and its tests
// need no node.
package decode
