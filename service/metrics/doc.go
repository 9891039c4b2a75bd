// Package metrics holds a node's Prometheus collectors: counters of what
// the state machine applied, the leader's expiry ticks and lag, the lease
// clock's extension at each leadership gain, the bus guard, snapshots,
// Raft's own measurements (bridged from go-metrics) and the log store's
// (raft-wal). Gauges of the state and of Raft are read at scrape time
// through Source, so they cost nothing between scrapes; the package never
// reaches into the node.
package metrics
