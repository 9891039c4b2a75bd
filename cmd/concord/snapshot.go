package main

// concord snapshot save|status|restore: backup files of a cluster's state,
// and new clusters seeded from them. The file format and the restore are
// package service/backupfile; the protocol is in service/backup.go. This
// command needs no node: it uses backupfile and the client only.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/backupfile"
)

// saveAttempts is how many times `snapshot save` starts a backup when the
// leader loses it part-way (a leader change).
const saveAttempts = 3

// snapshotCommands lists the subcommands in the order usage shows them.
var snapshotCommands = []string{"save", "status", "restore"}

// snapshotUsage is printed by `concord snapshot -h`.
const snapshotUsage = `Usage:
  concord snapshot save FILE [--server URLS] [--context NAME] [credentials] [--timeout 10s] [--json]
  concord snapshot status FILE [--json]
  concord snapshot restore FILE --data-dir DIR [--node-id n1] [--raft-addr 127.0.0.1:7422] [--json]

save asks the leader for a consistent backup of the whole state (every key
with its revisions and lease, every lease with its remaining time, the
revision and lease id counters, the idempotency cache and the change log)
and pulls it in chunks into FILE.tmp; it verifies the SHA-256, syncs, and
renames the file to FILE. --timeout bounds each request, not the whole
transfer; the leader answers the first request once it has written the
whole state, so give a large state a larger --timeout. status verifies FILE and prints its header. restore verifies FILE
and writes DIR (new or empty) so that
  concord serve --data-dir DIR --node-id ID --raft-addr ADDR ...
starts a new single-node cluster (with a new cluster id) holding exactly the
backup's state; other nodes then join it with --join.

Exit codes: 0 ok; 1 any other error (such as a DIR that is not empty);
2 usage; 5 unavailable (save: no NATS, or no leader until --timeout);
8 the backup failed verification: corrupt (checksum mismatch), truncated
or malformed, or of a version this build cannot read; 9 denied (save: NATS
refused the credentials, or the user may not send concord.cluster.backup
requests).

save connects like the other client commands: --server, --context,
--user/--password, --token, --creds, --nkey, --tls-cert/--tls-key, --tls-ca
and their environment variables (see "concord help").
`

// runSnapshot runs `concord snapshot ...` and returns the exit code.
func runSnapshot(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, snapshotUsage)
		return exitUsage
	}
	if slices.Contains([]string{"-h", "--help", "help"}, args[0]) {
		fmt.Print(snapshotUsage)
		return exitOK
	}
	cmds := map[string]func([]string) error{"save": runSnapshotSave, "status": runSnapshotStatus, "restore": runSnapshotRestore}
	err := subcommand("snapshot", args, cmds, "save|status|restore ...")
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	code := exitCode(err)
	if errors.Is(err, backupfile.ErrBadBackup) || errors.Is(err, backupfile.ErrChecksum) || errors.Is(err, backupfile.ErrUnsupported) ||
		errors.Is(err, client.ErrBackupCorrupt) {
		code = exitBadBackup
	}
	if err != nil {
		name := "snapshot"
		if _, rest, _ := hoistFlags(args); len(rest) > 0 && slices.Contains(snapshotCommands, rest[0]) {
			name += " " + rest[0]
		}
		fmt.Fprintf(os.Stderr, "concord %s: %v\n", name, err)
		if code == exitUsage {
			fmt.Fprintf(os.Stderr, "Run \"concord %s -h\" for its flags.\n", name)
		}
		if errors.Is(err, nats.ErrPermissionViolation) {
			fmt.Fprintln(os.Stderr, permissionHint)
		}
	}
	return code
}

// savedBackup is what `snapshot save --json` prints.
type savedBackup struct {
	File string `json:"file"`
	backupfile.Header
}

func runSnapshotSave(args []string) error {
	fs, cf := newFlags("snapshot save", "snapshot save FILE [flags]")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	file := pos[0]
	cl, err := cf.connect()
	if err != nil {
		return err
	}
	defer cl.Close()
	var h *backupfile.Header
	for attempt := 1; ; attempt++ {
		h, err = saveBackup(cf, cl, file)
		if errors.Is(err, client.ErrBackupNotFound) && attempt < saveAttempts {
			fmt.Fprintf(os.Stderr, "concord snapshot save: the leader lost the backup (%v); starting again\n", err)
			continue
		}
		break
	}
	if err != nil {
		return cf.failed(err)
	}
	return cf.output(savedBackup{File: file, Header: *h}, func(w io.Writer) {
		fmt.Fprintf(w, "saved %s: revision %d, %d bytes, sha256 %s\n", file, h.Revision, h.Size, h.SHA256)
		fmt.Fprintf(w, "taken %s by leader %s of cluster %s at index %d\n", h.Created, h.Leader, h.ClusterID, h.AppliedIndex)
	})
}

// saveBackup takes one backup and writes it to file: into file.tmp first,
// which it verifies and syncs before renaming it into place. On an error
// it removes file.tmp and leaves file as it was.
func saveBackup(cf *common, cl *client.Client, file string) (_ *backupfile.Header, err error) {
	// The file first: a path that cannot be written is refused before the
	// leader does any work.
	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", tmp, err)
	}
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			os.Remove(tmp)
		}
	}()
	// The client pulls the chunks and checks size and SHA-256; the header
	// goes first, once the leader has described the backup. --timeout
	// bounds each request, not the whole transfer.
	bw := bufio.NewWriterSize(f, 1<<20)
	pw := &progressWriter{w: bw}
	defer func() { pw.p.Finish() }()
	var h backupfile.Header
	writeHeader := func(b *schema.ClusterBackupReply) error {
		h = backupfile.NewHeader(b)
		if err := backupfile.WriteHeader(bw, h); err != nil {
			return err
		}
		pw.p = newProgress(progressOnTerminal(cf.json), "saving "+filepath.Base(file), b.Size, unitBytes)
		return nil
	}
	if _, err := cl.Backup(context.Background(), pw, client.OnBackupStarted(writeHeader), client.BackupRequestTimeout(cf.timeout)); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("sync %s: %w", tmp, err)
	}
	pw.p.Finish() // the transfer is done; the check below is not part of it
	pw.p = nil
	err = f.Close()
	f = nil
	if err != nil {
		return nil, fmt.Errorf("close %s: %w", tmp, err)
	}
	// Read the file back as restore will: header, checksum, payload.
	if _, err := backupfile.Verify(tmp); err != nil {
		return nil, fmt.Errorf("verify %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return nil, fmt.Errorf("rename %s: %w", tmp, err)
	}
	if d, err := os.Open(filepath.Dir(file)); err == nil {
		_ = d.Sync() // make the rename durable; best effort
		d.Close()
	}
	return &h, nil
}

// backupStatus is what `snapshot status --json` prints.
type backupStatus struct {
	File        string `json:"file"`
	FileVersion int    `json:"file_version"`
	backupfile.Header
	Keys     int   `json:"keys"`
	Leases   int64 `json:"leases"`
	Verified bool  `json:"verified"`
}

func runSnapshotStatus(args []string) error {
	fs := flag.NewFlagSet("snapshot status", flag.ContinueOnError)
	jsonOut := fs.Bool("json", false, "print the header and counts as one JSON object")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: concord snapshot status FILE [--json]\n\nVerifies a backup file (header, SHA-256, payload) and prints its header.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	info, err := backupfile.Verify(pos[0])
	if err != nil {
		return err
	}
	st := backupStatus{File: pos[0], FileVersion: info.FileVersion, Header: info.Header, Keys: info.Keys, Leases: info.Leases, Verified: true}
	if *jsonOut {
		return printJSON(os.Stdout, st)
	}
	h := info.Header
	fmt.Printf("file       %s (%s v%d)\n", st.File, backupfile.Magic, st.FileVersion)
	fmt.Printf("payload    %s version %d, %d bytes\n", h.Format, h.FormatVersion, h.Size)
	fmt.Printf("sha256     %s (verified)\n", h.SHA256)
	fmt.Printf("revision   %d\n", h.Revision)
	fmt.Printf("keys       %d\n", st.Keys)
	fmt.Printf("leases     %d\n", st.Leases)
	fmt.Printf("taken      %s by leader %s of cluster %s at index %d\n", h.Created, h.Leader, h.ClusterID, h.AppliedIndex)
	return nil
}

func runSnapshotRestore(args []string) error {
	defaults := serveIdentity()
	fs := flag.NewFlagSet("snapshot restore", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "the new node's data directory: new or empty (required)")
	nodeID := fs.String("node-id", defaults.NodeID, "the new node's id (give serve the same --node-id)")
	raftAddr := fs.String("raft-addr", defaults.RaftAddr, "the new node's Raft address (give serve the same --raft-addr)")
	jsonOut := fs.Bool("json", false, "print the result as one JSON object")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: concord snapshot restore FILE --data-dir DIR [--node-id ID] [--raft-addr ADDR] [--json]\n\n"+
			"Verifies FILE and writes DIR so that `concord serve --data-dir DIR --node-id ID --raft-addr ADDR`\n"+
			"starts a new single-node cluster holding exactly the backup's state. Others join it with --join.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *dataDir == "" {
		return usagef("--data-dir is required")
	}
	res, err := backupfile.Restore(pos[0], backupfile.RestoreOptions{DataDir: *dataDir, NodeID: *nodeID, RaftAddr: *raftAddr,
		Progress: &passProgress{show: progressOnTerminal(*jsonOut), file: filepath.Base(pos[0])}})
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(os.Stdout, map[string]any{
			"file": pos[0], "data_dir": res.DataDir, "node_id": res.NodeID, "raft_addr": res.RaftAddr, "cluster_id": res.ClusterID,
			"revision": res.Header.Revision, "keys": res.Keys, "leases": res.Leases, "backup": res.Header,
		})
	}
	fmt.Printf("restored revision %d (%d keys, %d leases) from %s into %s\n", res.Header.Revision, res.Keys, res.Leases, pos[0], res.DataDir)
	fmt.Printf("a new cluster %s with node %s at %s; start it with\n", res.ClusterID, res.NodeID, res.RaftAddr)
	fmt.Printf("  concord serve --data-dir %s --node-id %s --raft-addr %s ...\n", res.DataDir, res.NodeID, res.RaftAddr)
	fmt.Println("and add other nodes with --join.")
	return nil
}
