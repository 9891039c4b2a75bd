package fsm

import (
	"fmt"

	"github.com/concord-io/concord/schema"
)

// formatBatch is the first byte of an entry that carries many commands: the
// format byte, the number of commands (uvarint, at least one), then each
// command as a length-prefixed single-command entry, byte for byte what
// EncodeFor writes (format 1, 2 or 4, never another batch). Single-command
// entries keep formats 1 and 2, so every log written before batches existed
// replays unchanged.
const formatBatch = 3

// LogFormat is the newest log entry format this release reads. Releases
// before batch entries read formats 1 and 2 only, and would fail to apply
// a batch: a leader may write batches only while every member reads
// LogFormatBatch or newer. Likewise for the commands of LogFormatHistory
// (RequiredLogFormat says which a command needs).
const LogFormat = LogFormatTenant

// LogFormatBatch is the first LogFormat that reads batch entries.
const LogFormatBatch = formatBatch

// LogFormatHistory is the first LogFormat that reads compactions (OpCompact),
// range deletes and puts that carry a content type or metadata. The entry
// formats (first bytes 1 to 3) are unchanged; what is new is inside bodies.
const LogFormatHistory = 4

// LogFormatTxnCause is the first LogFormat that reads a transaction's
// deletes marked as such (Delete.ByTxn), whose tombstones say "txn".
const LogFormatTxnCause = 5

// LogFormatTenant is the first LogFormat that reads commands of a tenant
// other than the default one (entry format 4).
const LogFormatTenant = 6

// RequiredLogFormat returns the oldest LogFormat that applies body as this
// release does: LogFormatTxnCause for a transaction whose deletes are
// marked (Txn.MarkDeletes), LogFormatHistory for a compaction, a range
// delete and a put with a content type or metadata, alone or in a
// transaction; 1 for the rest. A leader proposes a body only when every member reads its format.
func RequiredLogFormat(body any) int {
	switch b := body.(type) {
	case *SetQuota, *TenantMove:
		return LogFormatTenant
	case *Compact:
		return LogFormatHistory
	case *Delete:
		if b.ByTxn {
			return LogFormatTxnCause
		}
		if b.IsRange {
			return LogFormatHistory
		}
	case *Put:
		if b.ContentType != "" || len(b.Metadata) > 0 {
			return LogFormatHistory
		}
	case *Txn:
		need := 1
		for _, branch := range [][]TxnOp{b.Success, b.Failure} {
			for _, op := range branch {
				switch {
				case op.Put != nil:
					need = max(need, RequiredLogFormat(op.Put))
				case op.Delete != nil:
					need = max(need, RequiredLogFormat(op.Delete))
				}
			}
		}
		return need
	}
	return 1
}

// MaxBatchCommands bounds the commands of one batch entry; a decoder refuses
// more, so a corrupt count cannot make it allocate wildly.
const MaxBatchCommands = 1 << 16

// IsBatch reports whether a log entry is a batch entry (EncodeBatch), whose
// ApplyEntry results are one per command.
func IsBatch(data []byte) bool { return len(data) > 0 && data[0] == formatBatch }

// EncodeBatch joins single-command entries written by Encode or EncodeKeyed
// into one log entry. Applying it (ApplyEntry) applies each command in
// order exactly as if it were its own entry, and returns one result each.
func EncodeBatch(entries [][]byte) ([]byte, error) {
	if len(entries) == 0 || len(entries) > MaxBatchCommands {
		return nil, fmt.Errorf("encode batch: %w: %d commands, want 1 to %d", ErrBadCommand, len(entries), MaxBatchCommands)
	}
	size := 1 + 3
	for i, e := range entries {
		if len(e) < headerLen || !isSingle(e[0]) {
			return nil, fmt.Errorf("encode batch: %w: command %d is not a single-command entry", ErrBadCommand, i)
		}
		size += len(e) + 5
	}
	w := encoder{buf: make([]byte, 1, size)}
	w.buf[0] = formatBatch
	w.uvarint(uint64(len(entries)))
	for _, e := range entries {
		w.bytes(e)
	}
	return w.buf, nil
}

// entryCommands splits a log entry into its commands' entries: a single
// command entry is its own only command. The parts share data's memory.
func entryCommands(data []byte) ([][]byte, error) {
	if !IsBatch(data) {
		return [][]byte{data}, nil
	}
	r := decoder{buf: data[1:]}
	n := r.count()
	if r.err == nil && (n == 0 || n > MaxBatchCommands) {
		return nil, fmt.Errorf("%w: batch of %d commands", ErrBadCommand, n)
	}
	parts := make([][]byte, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		parts = append(parts, r.bytes())
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: batch: %v", ErrBadCommand, r.err)
	}
	if len(r.buf) != 0 {
		return nil, fmt.Errorf("%w: batch: %d trailing bytes", ErrBadCommand, len(r.buf))
	}
	return parts, nil
}

// ApplyEntry applies one log entry of either kind and returns one result
// per command: a single-command entry as Apply does, a batch entry command
// by command, in order, each exactly as if it were its own entry (a command
// that fails, or does not decode, changes nothing and leaves its neighbours
// alone). An entry whose batch framing is broken yields a single result
// whose Err wraps ErrBadCommand, and changes nothing.
func (s *State) ApplyEntry(data []byte) []Result {
	if !IsBatch(data) {
		return []Result{s.Apply(data)}
	}
	parts, err := entryCommands(data)
	if err != nil {
		return []Result{{Err: err, Now: s.now}}
	}
	cmds := make([]Command, len(parts))
	errs := make([]error, len(parts))
	for i, p := range parts {
		cmds[i], errs[i] = Decode(p)
	}
	out := make([]Result, len(parts))
	for i := 0; i < len(cmds); i++ {
		if errs[i] != nil {
			out[i] = Result{Err: errs[i], Now: s.now}
			continue
		}
		// Consecutive identical keep-alives of one lease cost one renewal:
		// applied one by one, each would set the same ttl and a deadline
		// that the next one moves later, with replies that do not depend
		// on the time, so the last alone, at a clock advanced by every
		// stamp of the run, leaves the same state and the same replies.
		// A renewal at a later time only extends the lease, so each
		// keep-alive still keeps the lease until its own stamp plus ttl.
		j := i
		for j+1 < len(cmds) && errs[j+1] == nil && sameKeepAlive(cmds[i], cmds[j+1]) {
			j++
		}
		for k := i; k < j; k++ {
			s.now = max(s.now, cmds[k].Now)
			out[k].Now = s.now
		}
		r := s.ApplyCommand(cmds[j])
		for k := i; k < j; k++ {
			now := out[k].Now
			out[k] = r
			out[k].Now, out[k].Reply = now, copyKeepAliveReply(r.Reply)
		}
		out[j] = r
		i = j
	}
	return out
}

// sameKeepAlive reports whether b is a keep-alive that a keep-alive a
// applied just before it would make redundant: the same tenant, lease and
// ttl, and no idempotency key (a keyed command is remembered in the cache,
// which must see each).
func sameKeepAlive(a, b Command) bool {
	ka, ok := a.Body.(*KeepAlive)
	if !ok || a.IdempotencyKey != "" || b.IdempotencyKey != "" || a.Tenant != b.Tenant {
		return false
	}
	kb, ok := b.Body.(*KeepAlive)
	return ok && *ka == *kb
}

// copyKeepAliveReply gives each coalesced keep-alive a reply of its own.
func copyKeepAliveReply(reply any) any {
	if r, ok := reply.(*schema.LeaseKeepAliveReply); ok {
		c := *r
		return &c
	}
	return reply
}
