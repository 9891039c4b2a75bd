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
	"unicode/utf8"

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
	// exitDenied: NATS refused the credentials, or the user's permissions
	// refused a subject the command needs. Not retried.
	exitDenied = 9
	// exitOutcomeUnknown: a write that may or may not have been applied
	// (504 outcome_unknown, or no reply in time). A script reads the
	// state before it sends the write again.
	exitOutcomeUnknown = 10
)

// exitCodes is the documented table, in the order the usage text shows it.
var exitCodes = []struct {
	code    int
	meaning string
}{
	{exitOK, "ok (also: a transaction whose compares failed, succeeded=false; a delete that matched nothing;\n       watch and elect ended by SIGINT/SIGTERM)"},
	{exitError, "any other error (" + replyNames(schema.ClassFailed) + ",\n       a failed TLS handshake, a command that cannot start…)"},
	{exitUsage, "usage: bad command, flag or argument, or unreadable input (--metadata, kv txn JSON, kv put --file,\n       a credentials, nkey, certificate or key file)"},
	{exitNotFound, "not found: " + replyNames(schema.ClassNotFound) + ", `kv get` of a single key that does not exist,\n       or `status --tenant` of a tenant that has written nothing"},
	{exitConflict, "conflict: " + replyNames(schema.ClassConflict)},
	{exitUnavailable, "unavailable: no NATS connection, or " + replyNames(schema.ClassUnavailable) + " / no responders until --timeout"},
	{exitLost, "lock or elect: the session's lease was lost (CMD was killed)"},
	{exitCompacted, "history gone: " + replyNames(schema.ClassCompacted) + " (watch --from, kv get --rev or kv history --from\n" +
		"       at a revision below the compaction floor, which the history no longer holds)"},
	{exitBadBackup, "snapshot: the backup file failed verification (checksum, truncation, unknown format)"},
	{exitDenied, "denied: NATS refused the credentials (authorization violation), or the user's permissions refused\n       a publish or subscription the command needs (permissions violation); reported at once, not retried"},
	{exitOutcomeUnknown, "outcome unknown: a write may or may not have been applied (" + replyNames(schema.ClassOutcomeUnknown) + ", or no reply until\n       --timeout); read before retrying"},
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
  concord kv put KEY VALUE|- [--file FILE] [--lease ID | --ttl N] [--content-type T] [--metadata JSON] [--prev]
  concord kv get KEY [--prefix] [--rev N] [--limit N] [--after KEY] [--keys-only] [--count] [--serializable]
  concord kv get --from A [--to B]    the byte-wise range [A, B), with the same flags but --prefix
  concord kv del KEY [--prefix] [--prev]
  concord kv del --from A [--to B] [--prev]
  concord kv txn [--file FILE]        the transaction JSON from FILE, or from stdin
  concord kv history KEY [--from N] [--to N] [--limit N] [--newest-first] [--after N]
  concord kv compact REV              operators: drop the history at and below REV
  concord watch KEY [--prefix] [--from REV]
  concord lock NAME [--ttl 10s] [--grace 3s] -- CMD ARGS...
  concord elect NAME [--ttl 10s] [--proclaim VALUE]
  concord status [--tenant NAME]
  concord tenant list [TENANT]        operators: what each tenant holds, and its quota
  concord tenant quota TENANT [--leases N] [--keys N] [--value-bytes N] [--keepalive-many N] [--rate N] [--clear]
  concord tenant move TENANT --to-prefix P   operators: move a tenant to the cluster at prefix P

Flags may come before or after the arguments; put "--" before an argument
that starts with "-". The connection and output flags below may also come
before the command: concord --server URL kv get KEY. TTLs are whole
seconds: "10" or "10s".

Connection and output flags of the client commands (environment variable):
  --server URLS, -s      NATS URLs, comma-separated ($NATS_URL; default nats://127.0.0.1:4222)
  --context NAME         connect with this nats context ("nats context ls"; "" = the selected one) ($NATS_CONTEXT)
  --user NAME            NATS user; --user alone is a token, as in the nats CLI ($NATS_USER)
  --password PASSWORD    NATS password, with --user ($NATS_PASSWORD)
  --token TOKEN          NATS token ($NATS_TOKEN)
  --creds FILE           NATS credentials file: a user JWT and its nkey seed ($NATS_CREDS)
  --nkey FILE            file holding the user's nkey seed ($NATS_NKEY)
  --tls-cert FILE        TLS client certificate, with --tls-key ($NATS_CERT)
  --tls-key FILE         TLS client key ($NATS_KEY)
  --tls-ca FILE          CA certificates that signed the server's certificate ($NATS_CA)
  --subject-prefix P     subject prefix of the cluster (default concord; serve's --subject-prefix)
  --timeout D            bound on each call, retries included, and on connecting (default 10s)
  --json                 print replies as JSON, one object per line (default: text)
The nats CLI's spellings --tlscert, --tlskey and --tlsca work too.

Where the client connects and as whom: each setting comes from the first of
its flag; the nats context named by --context; its environment variable;
the nats context named by $NATS_CONTEXT; the default (nats://127.0.0.1:4222,
no credentials). The credentials (--user/--password, --token, --creds or
--nkey) are taken as one set from the first of these places that gives any,
and so are --tls-cert with --tls-key: a --user never pairs with a context's
password. Two kinds of credentials in one place are a usage error, and so is
a credentials, key or certificate file that cannot be read.

Replies are printed as text by default; with --json, each reply is one line
of JSON in the wire format of its subject (schema/json), and an error reply from the cluster is
printed as {"error":{...}} on stdout as well as described on stderr.

VALUE (kv put, elect --proclaim) is JSON when it parses as JSON, and a JSON
string otherwise: 42, true, null, {"a":1} and '"x"' are JSON; hello is "hello".
Quote a value that looks like JSON to store it as a string: '"42"'.

kv get prints "KEY VALUE" lines (one per key), with --rev N as the keys stood
right after revision N committed; a key put with --content-type or --metadata
has "  content_type: T" and "  metadata: JSON" lines below it. --prefix and
--from/--to compare bytes, not tokens: --prefix svc also matches svcx.a, and
--from svc. --to svc/ is every key under svc. and no other. kv history prints a key's changes, one line
per event as watch does (deletes with their cause); kv compact (operators)
drops the history at and below a revision. watch prints one line per event,
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

// replyNames lists the error replies of a class, as the usage text names
// them beside their exit code; the names come from schema.ErrorTable, so a
// new error name appears under its code without an edit here.
func replyNames(class schema.ErrorClass) string {
	var names []string
	for _, spec := range schema.ErrorTable {
		if spec.Class == class {
			names = append(names, spec.Name)
		}
	}
	return strings.Join(names, ", ")
}

// exitCode maps an error to the exit code table. An error reply's code
// follows its class in schema.ErrorTable.
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
	case errors.Is(err, errNotFound), isReplyOf(err, schema.ClassNotFound):
		return exitNotFound
	case isReplyOf(err, schema.ClassConflict):
		return exitConflict
	case errors.Is(err, errLost), errors.Is(err, client.ErrSessionExpired):
		return exitLost
	case isReplyOf(err, schema.ClassCompacted):
		return exitCompacted
	case errors.Is(err, client.ErrPermissionDenied), errors.Is(err, nats.ErrPermissionViolation),
		errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired):
		return exitDenied
	case errors.Is(err, client.ErrOutcomeUnknown):
		return exitOutcomeUnknown
	case errors.As(err, &ce), isReplyOf(err, schema.ClassUnavailable),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed):
		return exitUnavailable
	}
	return exitError
}

// isReplyOf reports whether err matches the client sentinel of an error
// name of the class.
func isReplyOf(err error, class schema.ErrorClass) bool {
	for _, spec := range schema.ErrorTable {
		if spec.Class == class && errors.Is(err, client.Sentinel(spec.Name)) {
			return true
		}
	}
	return false
}

// subcommands are the commands of the command groups, for messages.
var subcommands = map[string][]string{"lease": {"grant", "keepalive", "revoke", "info", "list"}, "kv": {"put", "get", "del", "txn", "history", "compact"},
	"tenant": {"list", "quota", "move"}}

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
	case "tenant":
		err = runTenant(args)
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	code := exitCode(err)
	if err != nil {
		name := cmd
		if _, rest, _ := hoistFlags(args); len(rest) > 0 && slices.Contains(subcommands[cmd], rest[0]) {
			name += " " + rest[0]
		}
		var es exitStatus
		if !errors.As(err, &es) || es.err != nil {
			fmt.Fprintf(os.Stderr, "concord %s: %v\n", name, err)
		}
		if code == exitUsage {
			fmt.Fprintf(os.Stderr, "Run \"concord %s -h\" for its flags, \"concord help\" for all commands.\n", name)
		}
		if errors.Is(err, nats.ErrPermissionViolation) {
			fmt.Fprintln(os.Stderr, permissionHint)
		}
	}
	return code
}

// permissionHint follows a permission violation's message.
const permissionHint = "The NATS user's permissions refuse this subject; the server's configuration grants them " +
	"(deploy/nats/roles.conf has Concord's roles)."

// subcommand dispatches "concord lease grant ..." style commands.
func subcommand(group string, args []string, cmds map[string]func([]string) error, order string) error {
	flags, args, err := hoistFlags(args)
	if err != nil {
		return err
	}
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
	return f(append(flags, args[1:]...))
}

// common holds the flags every client command takes.
type common struct {
	conn       connFlags
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
	c.conn = addConnFlags(fs)
	fs.StringVar(&c.natsCtx, "context", "", "nats context `NAME` to connect with, \"\" for the selected one ($NATS_CONTEXT)")
	fs.StringVar(&c.subjectPfx, "subject-prefix", subjects.DefaultPrefix, "subject prefix of the cluster")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on each call, retries included")
	fs.BoolVar(&c.json, "json", false, "print replies as JSON, one object per line")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: concord %s\n", synopsis)
		own, common := flag.NewFlagSet("", flag.ContinueOnError), flag.NewFlagSet("", flag.ContinueOnError)
		fs.VisitAll(func(f *flag.Flag) {
			into := own
			switch {
			case connAlias(f.Name):
				return
			case globalFlags().Lookup(f.Name) != nil:
				into = common
			}
			into.Var(f.Value, f.Name, f.Usage)
			into.Lookup(f.Name).DefValue = f.DefValue // not the value parsed so far
		})
		for _, g := range []struct {
			title string
			fs    *flag.FlagSet
		}{{"Flags", own}, {"Connection and output flags (before or after the command)", common}} {
			n := 0
			g.fs.VisitAll(func(*flag.Flag) { n++ })
			if n > 0 {
				fmt.Fprintf(fs.Output(), "\n%s:\n", g.title)
				g.fs.SetOutput(fs.Output())
				g.fs.PrintDefaults()
			}
		}
		fmt.Fprint(fs.Output(), "\nThe nats CLI's spellings --tlscert, --tlskey, --tlsca and -s work too.\n"+
			"Run \"concord help\" for where the client connects, as whom, and the exit codes.\n")
	}
	return fs, c
}

// globalFlags is a flag set with only the common flags: the flags that
// may come before the command (`concord --server URL status`).
func globalFlags() *flag.FlagSet {
	fs, _ := newFlags("", "")
	return fs
}

// hoistFlags splits the common flags off the front of args, up to the
// first argument that is not one: ["--server", "U", "kv", "get"] gives
// ["--server", "U"] and ["kv", "get"]. A flag that is not a common flag
// there is a usage error; -h and --help stay in rest.
func hoistFlags(args []string) (flags, rest []string, err error) {
	global := globalFlags()
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			return flags, args[i:], nil
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "h" || name == "help" {
			return flags, args[i:], nil
		}
		f := global.Lookup(name)
		if f == nil {
			return nil, nil, usagef("flag %s before the command: only the connection and output flags may come first", a)
		}
		flags = append(flags, a)
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); hasValue || ok && b.IsBoolFlag() {
			continue
		}
		if i+1 == len(args) {
			return nil, nil, usagef("flag needs an argument: %s", a)
		}
		i++
		flags = append(flags, args[i])
	}
	return flags, nil, nil
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

// connect connects as the common flags, the environment and the nats
// contexts say (see natsTarget and clientUsage for which wins).
func (c *common) connect() (*client.Client, error) {
	if _, err := subjects.New(c.subjectPfx); err != nil {
		return nil, usagef("--subject-prefix: %v", err)
	}
	t, err := c.natsTarget()
	if err != nil {
		return nil, err
	}
	natsOpts := append([]nats.Option{nats.Name("concord-cli"), nats.Timeout(c.timeout), nats.ErrorHandler(asyncError)}, t.opts...)
	cl, err := client.Connect(client.Prefix(c.subjectPfx), client.URL(t.url), client.NATSOptions(natsOpts...))
	if err != nil {
		return nil, connectError(t, err)
	}
	return cl, nil
}

// asyncError prints the asynchronous errors NATS reports, except
// permission violations: the client matches those to the call they refuse,
// and the command reports them once.
func asyncError(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		fmt.Fprintf(os.Stderr, "concord: %v\n", err)
	}
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
// parses, otherwise a JSON string; asString (kv put --string) makes it a
// string whatever it looks like. Text that starts like JSON ({, [ or ")
// and does not parse is refused, with stringHint saying how to store it
// as a string after all. Text that is not UTF-8 is refused: as a JSON
// string it would not survive the trip.
func jsonValue(s string, asString bool, stringHint string) (json.RawMessage, error) {
	if !utf8.ValidString(s) {
		return nil, usagef("the value is neither JSON nor UTF-8 text; encode binary data (base64, say) first")
	}
	if !asString {
		if json.Valid([]byte(s)) {
			return json.RawMessage(s), nil
		}
		// Text that opens like an object, an array or a string is JSON
		// with a mistake in it far more often than a string anyone meant.
		if t := strings.TrimLeft(s, " \t\r\n"); t != "" && strings.ContainsRune("{[\"", rune(t[0])) {
			var v any
			err := json.Unmarshal([]byte(s), &v)
			return nil, usagef("the value starts like JSON but is not JSON (%v): fix it, or %s", err, stringHint)
		}
	}
	b, _ := json.Marshal(s) // valid UTF-8 always encodes
	return b, nil
}

// count says n of a noun with the noun's number right: "1 key", "2 keys".
func count(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}

// checkQueueName checks a lock or election NAME before any lease is
// granted for it: the keys of its queue are NAME.<lease id>, so NAME must
// be the start of a valid key. The error names NAME, in the user's words.
func checkQueueName(what, name string) error {
	err := subjects.ValidateKey(name+".1", subjects.MaxKeyBytes)
	var ke *subjects.KeyError
	if errors.As(err, &ke) {
		return usagef("%s name %q %s (its keys are NAME.<lease id>)", what, name, ke.Rule)
	}
	return err
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
