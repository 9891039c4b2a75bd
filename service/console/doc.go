// Package console serves a node's operator console on --console-listen:
// read-only pages of the cluster's members, leader, term and revision,
// the leases with live countdowns, metadata and keys, the keys under a
// prefix with their history, a live event stream, and the tenants' use.
//
// It is a client of the cluster like any other: every page is built from
// requests through the node's NATS connection (Concord's own account) to
// whichever node leads, so a follower's console shows what the leader
// does. Pages are rendered on the server with html/template; a small
// script, served from the binary like the pages (no CDN, nothing to
// build), runs the countdowns, polls the leases and reads the event
// stream (server-sent events).
package console
