package main

// The client commands (lease, kv, watch, lock, elect, status): shared
// flags, connection, output and exit codes. The behaviour lives in
// client/; these files parse arguments, print replies and choose exit
// codes.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// Exit codes of the client commands. exitCodes below is the table the
// usage text prints; exitCode maps an error to its code.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitConflict    = 4
	exitUnavailable = 5
	exitLost        = 6
	exitCompacted   = 7
	// exitBadBackup: a backup that is corrupt (checksum), truncated or
	// malformed, or of a version this build cannot read.
	exitBadBackup = 8
)

// exitCodes is the documented table, in the order the usage text shows it.
var exitCodes = []struct {
	code    int
	meaning string
}{
	{exitOK, "ok (also: a transaction whose compares failed, succeeded=false; a delete that matched nothing;\n       watch and elect ended by SIGINT/SIGTERM)"},
	{exitError, "any other error (invalid_request, too_large, limit_exceeded, internal, a command that cannot start…)"},
	{exitUsage, "usage: bad command, flag or argument, or unreadable input (--metadata, kv txn JSON)"},
	{exitNotFound, "not found: lease_not_found, or `kv get` of a single key that does not exist"},
	{exitConflict, "conflict: lease_exists, lease_conflict, idempotency_conflict"},
	{exitUnavailable, "unavailable: no NATS connection, or not_leader / unavailable / no responders until --timeout"},
	{exitLost, "lock or elect: the session's lease was lost (CMD was killed)"},
	{exitCompacted, "watch: the change log no longer holds the revision to resume from"},
	{exitBadBackup, "snapshot: the backup file failed verification (checksum, truncation, unknown format)"},
}

// clientUsage is the part of `concord help` about the client commands.
func clientUsage() string {
	var b strings.Builder
	b.WriteString(`Client commands:
  concord lease grant TTL [--id N] [--metadata JSON]
  concord lease keepalive ID [--ttl N]
  concord lease revoke ID
  concord lease info ID [--keys]
  concord lease list [--all] [--limit N] [--after ID]
  concord kv put KEY VALUE [--lease ID | --ttl N] [--prev]
  concord kv get KEY [--prefix] [--limit N] [--after KEY] [--keys-only] [--count] [--serializable]
  concord kv del KEY [--prefix] [--prev]
  concord kv txn [--file FILE]        the transaction JSON from FILE, or from stdin
  concord watch KEY [--prefix] [--from REV]
  concord lock NAME [--ttl 10s] [--grace 3s] -- CMD ARGS...
  concord elect NAME [--ttl 10s] [--proclaim VALUE]
  concord status

Flags may come before or after the arguments; put "--" before an argument
that starts with "-". TTLs are whole seconds: "10" or "10s".

Common flags of the client commands:
  --server URLS          NATS URLs, comma-separated
  --context NAME         connect with this nats context ("nats context ls"; "" = the selected one)
  --subject-prefix P     subject prefix of the cluster (default concord; serve's --subject-prefix)
  --timeout D            bound on each call, retries included, and on connecting (default 10s)
  --json                 print replies as JSON, one object per line (default: text)

Where the client connects, first match wins: --server; --context; $NATS_URL;
$NATS_CONTEXT (a context name); nats://127.0.0.1:4222. --server and --context
together are a usage error.

Replies are printed as text by default; with --json, each reply is one line
of JSON in the wire format of its subject (schema/json), and an error reply from the cluster is
printed as {"error":{...}} on stdout as well as described on stderr.

VALUE (kv put, elect --proclaim) is JSON when it parses as JSON, and a JSON
string otherwise: 42, true, null, {"a":1} and '"x"' are JSON; hello is "hello".
Quote a value that looks like JSON to store it as a string: '"42"'.

kv get prints "KEY VALUE" lines (one per key), watch one line per event,
elect without --proclaim one line per leader change. lock runs CMD with
CONCORD_FENCING_TOKEN set, in its own process group; stdout belongs to CMD
and lock's own messages go to stderr. lock exits with CMD's exit code
(128+N when CMD died of signal N, or when lock was interrupted by signal N
before CMD started). If the session is lost while CMD runs, CMD's group gets
SIGTERM, then SIGKILL after --grace, and lock exits 6. SIGINT and SIGTERM
are forwarded to CMD; the lock is released when CMD exits. With --json, lock
prints {"event":"acquired",...,"fencing_token":N} on stderr. lock and elect
wait for the lock or for leadership without a time limit; --timeout bounds
their other calls. A missing single key makes kv get exit 3 (with --json it
still prints the reply); a prefix that matches nothing is exit 0.

Exit codes of the client commands:
`)
	for _, e := range exitCodes {
		fmt.Fprintf(&b, "  %d    %s\n", e.code, e.meaning)
	}
	return b.String()
}

// usageError is a bad command line or unreadable input: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exitStatus is an exit code chosen by a command, with an optional message.
type exitStatus struct {
	code int
	err  error
}

func (e exitStatus) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e exitStatus) Unwrap() error { return e.err }

// errNotFound is a read that found nothing where something was asked for.
var errNotFound = errors.New("not found")

// errLost is a session lost while holding a lock or leading an election.
var errLost = errors.New("session lost")

// errConnect wraps a failure to reach NATS at all.
type errConnect struct{ err error }

func (e errConnect) Error() string { return e.err.Error() }
func (e errConnect) Unwrap() error { return e.err }

// exitCode maps an error to the exit code table.
func exitCode(err error) int {
	var ue usageError
	var es exitStatus
	var ce errConnect
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &es):
		return es.code
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, errNotFound), errors.Is(err, client.ErrLeaseNotFound), errors.Is(err, client.ErrNodeNotFound):
		return exitNotFound
	case errors.Is(err, client.ErrLeaseExists), errors.Is(err, client.ErrLeaseConflict), errors.Is(err, client.ErrIdempotencyConflict):
		return exitConflict
	case errors.Is(err, errLost), errors.Is(err, client.ErrSessionExpired):
		return exitLost
	case errors.Is(err, client.ErrCompacted):
		return exitCompacted
	case errors.As(err, &ce), errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrNotLeader),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed):
		return exitUnavailable
	}
	return exitError
}

// subcommands are the commands of the command groups, for messages.
var subcommands = map[string][]string{"lease": {"grant", "keepalive", "revoke", "info", "list"}, "kv": {"put", "get", "del", "txn"}}

// runCLI runs one client command and returns the process exit code.
func runCLI(cmd string, args []string) int {
	var err error
	switch cmd {
	case "lease":
		err = runLease(args)
	case "kv":
		err = runKV(args)
	case "watch":
		err = runWatch(args)
	case "lock":
		err = runLock(args)
	case "elect":
		err = runElect(args)
	case "status":
		err = runStatus(args)
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	code := exitCode(err)
	if err != nil {
		name := cmd
		if len(args) > 0 && slices.Contains(subcommands[cmd], args[0]) {
			name += " " + args[0]
		}
		var es exitStatus
		if !errors.As(err, &es) || es.err != nil {
			fmt.Fprintf(os.Stderr, "concord %s: %v\n", name, err)
		}
		if code == exitUsage {
			fmt.Fprintf(os.Stderr, "Run \"concord %s -h\" for its flags, \"concord help\" for all commands.\n", name)
		}
	}
	return code
}

// subcommand dispatches "concord lease grant ..." style commands.
func subcommand(group string, args []string, cmds map[string]func([]string) error, order string) error {
	if len(args) == 0 {
		return usagef("missing command: concord %s %s", group, order)
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Printf("Usage: concord %s %s\n\nRun \"concord %s <command> -h\" for its flags.\n", group, order, group)
		return flag.ErrHelp
	}
	f, ok := cmds[args[0]]
	if !ok {
		return usagef("unknown command %q: concord %s %s", args[0], group, order)
	}
	return f(args[1:])
}

// common holds the flags every client command takes.
type common struct {
	server     string
	natsCtx    string
	subjectPfx string
	timeout    time.Duration
	json       bool
	fs         *flag.FlagSet
}

// newFlags returns a flag set with the common flags. synopsis is the
// command's usage line after "concord ".
func newFlags(name, synopsis string) (*flag.FlagSet, *common) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	c := &common{fs: fs}
	fs.StringVar(&c.server, "server", "", "NATS URLs, comma-separated (default $NATS_URL, else nats://127.0.0.1:4222)")
	fs.StringVar(&c.natsCtx, "context", "", "nats context to connect with (default $NATS_CONTEXT when neither --server nor $NATS_URL is set)")
	fs.StringVar(&c.subjectPfx, "subject-prefix", subjects.DefaultPrefix, "subject prefix of the cluster")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on each call, retries included")
	fs.BoolVar(&c.json, "json", false, "print replies as JSON, one object per line")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: concord %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nRun \"concord help\" for where the client connects and the exit codes.\n")
	}
	return fs, c
}

// parse parses args with flags anywhere among the arguments. Everything
// after the first "--" is returned in rest, and dashdash reports whether
// there was one.
func parse(fs *flag.FlagSet, args []string) (pos, rest []string, dashdash bool, err error) {
	for i, a := range args {
		if a == "--" {
			args, rest, dashdash = args[:i], args[i+1:], true
			break
		}
	}
	fs.SetOutput(io.Discard) // errors are printed once, by runCLI
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(os.Stdout)
				fs.Usage()
				return nil, nil, false, err
			}
			return nil, nil, false, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	return pos, rest, dashdash, nil
}

// parseArgs is parse for commands without "--": anything after it is an
// argument too.
func parseArgs(fs *flag.FlagSet, args []string, min, max int) ([]string, error) {
	pos, rest, _, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	pos = append(pos, rest...)
	if len(pos) < min || len(pos) > max {
		switch {
		case min == max && min == 0:
			return nil, usagef("unexpected arguments %q", pos)
		case len(pos) < min:
			return nil, usagef("missing arguments (got %d, want %d)", len(pos), min)
		}
		return nil, usagef("unexpected arguments %q", pos[max:])
	}
	return pos, nil
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// connect connects as the common flags and the environment say (see
// clientUsage for the order).
func (c *common) connect() (*client.Client, error) {
	if _, err := subjects.New(c.subjectPfx); err != nil {
		return nil, usagef("--subject-prefix: %v", err)
	}
	serverSet, contextSet := isSet(c.fs, "server"), isSet(c.fs, "context")
	if serverSet && contextSet {
		return nil, usagef("give --server or --context, not both")
	}
	opts := []client.Option{client.Prefix(c.subjectPfx), client.NATSOptions(nats.Name("concord-cli"), nats.Timeout(c.timeout))}
	var where string
	switch {
	case serverSet:
		opts, where = append(opts, client.URL(c.server)), c.server
	case contextSet:
		opts, where = append(opts, client.NATSContext(c.natsCtx)), "nats context "+strconv.Quote(c.natsCtx)
	case os.Getenv("NATS_URL") != "":
		opts, where = append(opts, client.URL(os.Getenv("NATS_URL"))), os.Getenv("NATS_URL")
	case os.Getenv("NATS_CONTEXT") != "":
		opts, where = append(opts, client.NATSContext(os.Getenv("NATS_CONTEXT"))), "nats context "+strconv.Quote(os.Getenv("NATS_CONTEXT"))
	default:
		opts, where = append(opts, client.URL(nats.DefaultURL)), nats.DefaultURL
	}
	cl, err := client.Connect(opts...)
	if err != nil {
		if errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) || isNetError(err) {
			return nil, errConnect{fmt.Errorf("cannot reach NATS (%s): %w", where, err)}
		}
		return nil, err
	}
	return cl, nil
}

func isNetError(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne)
}

// callCtx bounds one command's calls by --timeout.
func (c *common) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

// printJSON writes v as one line of compact JSON.
// callOnce connects, makes one call within --timeout, and returns its reply;
// an error comes back classified for the exit code.
func callOnce[R any](c *common, f func(context.Context, *client.Client) (R, error)) (R, error) {
	var zero R
	cl, err := c.connect()
	if err != nil {
		return zero, err
	}
	defer cl.Close()
	ctx, cancel := c.callCtx()
	defer cancel()
	r, err := f(ctx, cl)
	if err != nil {
		return zero, c.failed(err)
	}
	return r, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// output prints a reply: JSON with --json, else whatever human prints.
func (c *common) output(v any, human func(w io.Writer)) error {
	if c.json {
		return printJSON(os.Stdout, v)
	}
	human(os.Stdout)
	return nil
}

// failed prints a server error reply as JSON on stdout when --json is set
// (scripts then see {"error":{...}} as they would from the wire) and
// returns err for the exit code and the message on stderr.
func (c *common) failed(err error) error {
	var e *client.Error
	if c.json && errors.As(err, &e) {
		_ = printJSON(os.Stdout, schema.ErrorReply{Error: &schema.Error{Code: e.Code, Name: e.Name, Description: e.Description}})
	}
	return err
}

// jsonValue is VALUE as kv put and elect --proclaim take it: JSON if it
// parses, otherwise a JSON string.
func jsonValue(s string) json.RawMessage {
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s) // a string always encodes
	return b
}

// seconds is a TTL flag or argument in whole seconds: "10" or "10s".
type seconds struct {
	n   int64
	set bool
}

func (s *seconds) String() string { return strconv.FormatInt(s.n, 10) + "s" }

func (s *seconds) Set(v string) error {
	n, err := parseSeconds(v)
	if err != nil {
		return err
	}
	s.n, s.set = n, true
	return nil
}

// parseSeconds parses a TTL: an integer of seconds or a Go duration that
// is a whole number of seconds.
func parseSeconds(v string) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d%time.Second != 0 {
		return 0, fmt.Errorf("%q is not a whole number of seconds (10 or 10s)", v)
	}
	return int64(d / time.Second), nil
}

// parseID parses a lease id argument.
func parseID(what, v string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, usagef("%s: %q is not an integer", what, v)
	}
	return n, nil
}

// msText formats a remaining time in milliseconds.
func msText(n int64) string { return (time.Duration(n) * time.Millisecond).String() }

// signalExit is the conventional exit code of death by signal: 128+N.
func signalExit(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitError
}
