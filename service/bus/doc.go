// Package bus is a node's dealings with the NATS bus beyond serving
// requests. Two clusters answering one subject prefix would each serve
// part of the requests from their own state, so a node bootstraps only on
// positive evidence that no other cluster serves the prefix (Guard),
// refuses to restart where another one answers, and, while another one
// is seen, stops serving (Fence). A node that cannot serve is never
// silent: the Standby answers with what it is doing, 503 where nothing
// can have changed and 504 where another node may apply the request. The
// FormatGate lets a leader write what only newer releases read (batch
// entries, newer commands, snapshot version 5) once every member has said
// it reads it. The Prober is how all of them ask the bus who is there.
//
// The package sees its node only through what it declares: StandbyNode,
// Replier, FenceHooks and FormatGateOptions.
package bus
