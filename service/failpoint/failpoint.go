// Package failpoint names the points on a node's write path where the
// robustness suite (tests/robustness) crashes a node on demand: where no
// real fault can be timed to land, such as between a log append and its
// fsync, or half-way through a snapshot install.
//
// The points exist only in a binary built with the failpoints tag
// (`go build -tags failpoints`). There each is a gofail failpoint
// (go.etcd.io/gofail/runtime, the library etcd's robustness suite uses),
// set by the environment when the process starts
// (GOFAIL_FAILPOINTS="logBeforeSync=20*off->return(\"kill\")") or over
// HTTP while it runs (GOFAIL_HTTP=addr; PUT /<name> with the terms as the
// body). A point whose terms return "kill" kills the process with SIGKILL
// on the spot: no deferred function, flush or close runs, as in a crash;
// gofail's own sleep, panic and print work too. In every other build
// Inject is an empty function, and the binary holds no gofail code
// (tests/architecture_test.go checks both).
package failpoint

// The points. Each name is what GOFAIL_FAILPOINTS and GOFAIL_HTTP call it.
const (
	// LogBeforeSync: a Raft log segment was written and is about to be
	// fsynced (an append, a segment's header, or its seal).
	LogBeforeSync = "logBeforeSync"
	// LogAfterSync: that fsync returned, and Raft has not heard of it yet.
	LogAfterSync = "logAfterSync"
	// BeforeReply: a command was committed and applied on the leader,
	// and its requester has not been answered.
	BeforeReply = "beforeReply"
	// SnapshotWrite: before each write of a snapshot's data to its file.
	SnapshotWrite = "snapshotWrite"
	// SnapshotBeforeRename: a snapshot's data is written and not yet
	// synced and renamed into place.
	SnapshotBeforeRename = "snapshotBeforeRename"
	// SnapshotRestore: half of a snapshot has been read into the state
	// machine (at start, when a follower installs the leader's, or in a
	// user's restore).
	SnapshotRestore = "snapshotRestore"
	// MigrationStep: after each step of the log-store migration
	// (service/logstore/migrate.go), so that a count picks the step.
	MigrationStep = "migrationStep"
)

// Names lists every point.
var Names = []string{LogBeforeSync, LogAfterSync, BeforeReply, SnapshotWrite, SnapshotBeforeRename, SnapshotRestore, MigrationStep}

// killValue is what a point's terms return to kill the process.
const killValue = "kill"
