package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/freeport"
)

// The CLI's exit codes, as `concord help` documents them.
const (
	cliOK          = 0
	cliError       = 1
	cliUsage       = 2
	cliNotFound    = 3
	cliConflict    = 4
	cliUnavailable = 5
	cliLost        = 6
	cliCompacted   = 7
)

// natsEnv are the environment variables the client commands read, as the
// nats CLI does; a test sets them itself.
var natsEnv = []string{"NATS_URL", "NATS_CONTEXT", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "NATS_CREDS", "NATS_NKEY",
	"NATS_CERT", "NATS_KEY", "NATS_CA"}

// cli runs the concord binary's client commands with a fixed environment:
// $NATS_URL names the node, no nats context is selected, and no other
// variable of natsEnv is set.
type cli struct {
	t   *testing.T
	env []string
}

func newCLI(t *testing.T, natsURL string, extraEnv ...string) *cli {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(natsEnv, name) && name != "XDG_CONFIG_HOME" {
			env = append(env, kv)
		}
	}
	env = append(env, "XDG_CONFIG_HOME="+t.TempDir())
	if natsURL != "" {
		env = append(env, "NATS_URL="+natsURL)
	}
	return &cli{t: t, env: append(env, extraEnv...)}
}

// with returns a cli with more environment variables (later ones win).
func (c *cli) with(env ...string) *cli {
	return &cli{t: c.t, env: append(append([]string(nil), c.env...), env...)}
}

// cliResult is one finished run.
type cliResult struct {
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
}

// run runs concord with args and stdin and returns what it did.
func (c *cli) run(stdin string, args ...string) cliResult {
	c.t.Helper()
	p := newProc(c.t, 30*time.Second, binPath, args...)
	p.cmd.Env = c.env
	p.cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	p.cmd.Stdout, p.cmd.Stderr = &stdout, &stderr
	p.cmd.WaitDelay = 5 * time.Second
	err := p.run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		c.t.Fatalf("concord %q: %v (stderr %q)", args, err, r.stderr)
	}
	return r
}

// expect runs concord and fails unless it exits with code.
func (c *cli) expect(code int, args ...string) cliResult {
	c.t.Helper()
	r := c.run("", args...)
	if r.code != code {
		c.t.Fatalf("concord %q: %v; want exit %d", args, r, code)
	}
	return r
}

// ok runs concord, which must succeed, and returns its stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	return c.expect(cliOK, args...).stdout
}

// jsonOut runs concord with --json, which must exit with code, checks
// that stdout is one JSON object valid against the named schema, and
// decodes it into out (when not nil).
func (c *cli) jsonOut(code int, schemaName string, out any, args ...string) []byte {
	c.t.Helper()
	r := c.expect(code, append(args, "--json")...)
	line := []byte(strings.TrimSpace(r.stdout))
	if strings.Count(r.stdout, "\n") != 1 {
		c.t.Fatalf("concord %q --json: want one line of JSON, got %q", args, r.stdout)
	}
	if err := schema.Validate(schemaName, line); err != nil {
		c.t.Fatalf("concord %q --json: %s fails schema %s: %v", args, line, schemaName, err)
	}
	if out != nil {
		mustUnmarshal(c.t, line, out)
	}
	return line
}

// bgCLI is concord running in the background.
type bgCLI struct {
	t              *testing.T
	args           []string
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	done           chan struct{}
	code           int
}

// start runs concord in the background; the test's end kills it.
func (c *cli) start(args ...string) *bgCLI {
	c.t.Helper()
	b := &bgCLI{t: c.t, args: args, done: make(chan struct{})}
	p := newProc(c.t, 0, binPath, args...)
	b.cmd = p.cmd
	b.cmd.Env = c.env
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	b.cmd.WaitDelay = 5 * time.Second
	if err := p.start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		defer close(b.done)
		err := p.wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee) && ee.Exited():
			b.code = ee.ExitCode()
		default:
			b.code = -1
		}
	}()
	c.t.Cleanup(func() {
		p.kill()
		<-b.done
		if c.t.Failed() {
			c.t.Logf("concord %q: stdout %q, stderr %q", args, b.stdout.String(), b.stderr.String())
		}
	})
	return b
}

// waitStdout waits until stdout contains s.
func (b *bgCLI) waitStdout(s string, timeout time.Duration) {
	b.t.Helper()
	checkFor(b.t, timeout, 10*time.Millisecond, func() error {
		if out := b.stdout.String(); !strings.Contains(out, s) {
			return fmt.Errorf("concord %q: stdout %q lacks %q (stderr %q)", b.args, out, s, b.stderr.String())
		}
		return nil
	})
}

// waitStderr waits until stderr contains s.
func (b *bgCLI) waitStderr(s string, timeout time.Duration) {
	b.t.Helper()
	checkFor(b.t, timeout, 10*time.Millisecond, func() error {
		if out := b.stderr.String(); !strings.Contains(out, s) {
			return fmt.Errorf("concord %q: stderr %q lacks %q", b.args, out, s)
		}
		return nil
	})
}

func (b *bgCLI) signal(sig syscall.Signal) {
	b.t.Helper()
	if err := b.cmd.Process.Signal(sig); err != nil {
		b.t.Fatalf("signal concord %q: %v", b.args, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (b *bgCLI) wait(timeout time.Duration) int {
	b.t.Helper()
	select {
	case <-b.done:
		return b.code
	case <-time.After(timeout):
		b.t.Fatalf("concord %q still running after %s: stdout %q, stderr %q", b.args, timeout, b.stdout.String(), b.stderr.String())
	}
	return 0
}

func (b *bgCLI) exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

func TestCLILeaseCommands(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := newCLI(t, n.natsURL)

	if out := c.ok("lease", "grant", "30", "--metadata", `{"owner":"cli"}`); out != "lease 1 granted, ttl 30s\n" {
		t.Fatalf("lease grant: %q", out)
	}
	var g schema.LeaseGrantReply
	c.jsonOut(cliOK, "lease.grant.reply", &g, "lease", "grant", "1m")
	if g.ID != 2 || g.TTL != 60 {
		t.Fatalf("lease grant --json: %+v", g)
	}
	c.jsonOut(cliOK, "lease.grant.reply", &g, "lease", "grant", "--id", "10", "30")
	if g.ID != 10 {
		t.Fatalf("lease grant --id 10: %+v", g)
	}

	// Conflict: the id is taken.
	r := c.expect(cliConflict, "lease", "grant", "30", "--id", "1")
	if r.stdout != "" || !strings.Contains(r.stderr, "lease_exists") {
		t.Fatalf("lease grant of a taken id: %v", r)
	}
	var er schema.ErrorReply
	c.jsonOut(cliConflict, "error", &er, "lease", "grant", "30", "--id", "1")
	if er.Error.Name != schema.ErrLeaseExists || er.Error.Code != 409 {
		t.Fatalf("lease grant --json of a taken id: %+v", er.Error)
	}

	if out := c.ok("lease", "keepalive", "1", "--ttl", "20"); !strings.HasPrefix(out, "lease 1 renewed, ttl 20s, ") {
		t.Fatalf("lease keepalive: %q", out)
	}
	var ka schema.LeaseKeepAliveReply
	c.jsonOut(cliOK, "lease.keepalive.reply", &ka, "lease", "keepalive", "1")
	if ka.ID != 1 || ka.TTL != 20 || ka.RemainingMS > 20000 || ka.RemainingMS < 19000 {
		t.Fatalf("lease keepalive --json: %+v", ka)
	}

	c.ok("kv", "put", "svc.api.n1", `{"addr":"10.0.0.5"}`, "--lease", "1")
	out := c.ok("lease", "info", "1", "--keys")
	for _, want := range []string{"lease:               1\n", "ttl:                 20s\n", `metadata:            {"owner":"cli"}` + "\n", "keys:                1\n", "  svc.api.n1\n"} {
		if !strings.Contains(out, want) {
			t.Fatalf("lease info --keys: %q lacks %q", out, want)
		}
	}
	var info schema.LeaseInfo
	c.jsonOut(cliOK, "lease.info.reply", &info, "lease", "info", "1", "--keys")
	if info.ID != 1 || info.KeyCount != 1 || len(info.Keys) != 1 || info.Keys[0] != "svc.api.n1" || string(info.Metadata) != `{"owner":"cli"}` {
		t.Fatalf("lease info --json: %+v", info)
	}

	// Not found.
	for _, args := range [][]string{{"lease", "info", "99"}, {"lease", "keepalive", "99"}, {"lease", "revoke", "99"}} {
		r := c.expect(cliNotFound, args...)
		if !strings.Contains(r.stderr, "lease 99 not found") {
			t.Fatalf("%q: %v", args, r)
		}
		c.jsonOut(cliNotFound, "error", nil, args...)
	}

	// List: an anonymous lease only with --all.
	c.ok("kv", "put", "tmp.k", "v", "--ttl", "30")
	out = c.ok("lease", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID ") || !strings.HasPrefix(lines[1], "1 ") || !strings.Contains(lines[1], `{"owner":"cli"}`) {
		t.Fatalf("lease list: %q", out)
	}
	var list schema.LeaseListReply
	c.jsonOut(cliOK, "lease.list.reply", &list, "lease", "list", "--all")
	if len(list.Leases) != 4 || !list.Leases[3].Anonymous {
		t.Fatalf("lease list --all --json: %+v", list)
	}
	c.jsonOut(cliOK, "lease.list.reply", &list, "lease", "list", "--limit", "1", "--after", "1")
	if len(list.Leases) != 1 || list.Leases[0].ID != 2 || !list.More {
		t.Fatalf("lease list --limit 1 --after 1: %+v", list)
	}
	if out := c.ok("lease", "list", "--limit", "1"); !strings.Contains(out, "more: continue with --after 1\n") {
		t.Fatalf("lease list --limit 1: %q", out)
	}

	if out := c.ok("lease", "revoke", "1"); out != "lease 1 revoked, 1 key deleted at revision 3\n" {
		t.Fatalf("lease revoke: %q", out)
	}
	var rv schema.LeaseRevokeReply
	c.jsonOut(cliOK, "lease.revoke.reply", &rv, "lease", "revoke", "2")
	if rv.Deleted != 0 {
		t.Fatalf("lease revoke --json: %+v", rv)
	}

	// Usage errors, and an invalid request the server refuses.
	for _, args := range [][]string{{"lease"}, {"lease", "bogus"}, {"lease", "grant"}, {"lease", "grant", "ten"},
		{"lease", "grant", "1.5s"}, {"lease", "grant", "30", "--metadata", "{oops"}, {"lease", "info", "x"},
		{"lease", "info", "1", "2"}, {"lease", "list", "--nope"}, {"bogus"}} {
		r := c.expect(cliUsage, args...)
		if r.stdout != "" || r.stderr == "" {
			t.Fatalf("%q: %v", args, r)
		}
	}
	if r := c.expect(cliError, "lease", "grant", "0"); !strings.Contains(r.stderr, "invalid_request") {
		t.Fatalf("lease grant 0: %v", r)
	}
	if out := c.ok("lease", "grant", "-h"); !strings.Contains(out, "Usage: concord lease grant TTL") {
		t.Fatalf("lease grant -h: %q", out)
	}
	if out := c.ok("help"); !strings.Contains(out, "Exit codes of the client commands:") || !strings.Contains(out, "$NATS_CONTEXT") {
		t.Fatalf("help: %q", out)
	}
}

func TestCLIKVCommands(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := newCLI(t, n.natsURL)
	c.ok("lease", "grant", "60")
	c.ok("lease", "grant", "60")

	if out := c.ok("kv", "put", "svc.api.n1", `{"addr":"10.0.0.5"}`, "--lease", "1"); out != "revision 1\n" {
		t.Fatalf("kv put: %q", out)
	}
	c.ok("kv", "put", "svc.api.n2", "hello") // not JSON: stored as a string
	var p schema.KVPutReply
	c.jsonOut(cliOK, "kv.put.reply", &p, "kv", "put", "svc.api.n3", "42", "--ttl", "30")
	if p.Revision != 3 {
		t.Fatalf("kv put --json: %+v", p)
	}
	if out := c.ok("kv", "put", "svc.api.n2", `"42"`, "--prev"); out != "revision 4\nprevious: svc.api.n2 \"hello\"\n" {
		t.Fatalf("kv put --prev: %q", out)
	}
	c.jsonOut(cliOK, "kv.put.reply", &p, "kv", "put", "svc.api.n4", "null", "--prev")
	if p.PrevKV != nil {
		t.Fatalf("kv put --prev of a new key: %+v", p)
	}
	if r := c.expect(cliConflict, "kv", "put", "svc.api.n1", "1", "--lease", "2"); !strings.Contains(r.stderr, "lease_conflict") {
		t.Fatalf("kv put to another lease: %v", r)
	}
	if r := c.expect(cliNotFound, "kv", "put", "x.y", "1", "--lease", "77"); !strings.Contains(r.stderr, "lease_not_found") {
		t.Fatalf("kv put to a missing lease: %v", r)
	}
	c.expect(cliUsage, "kv", "put", "x.y", "1", "--lease", "1", "--ttl", "5")
	c.expect(cliUsage, "kv", "put", "x.y")
	c.expect(cliError, "kv", "put", "bad key", "1")

	if out := c.ok("kv", "get", "svc.api.n1"); out != "svc.api.n1 {\"addr\":\"10.0.0.5\"}\n" {
		t.Fatalf("kv get: %q", out)
	}
	var g schema.KVGetReply
	c.jsonOut(cliOK, "kv.get.reply", &g, "kv", "get", "svc.api.n2")
	if len(g.KVs) != 1 || string(g.KVs[0].Value) != `"42"` || g.KVs[0].Version != 2 {
		t.Fatalf("kv get --json: %+v", g)
	}
	want := "svc.api.n1 {\"addr\":\"10.0.0.5\"}\nsvc.api.n2 \"42\"\nsvc.api.n3 42\nsvc.api.n4 null\n"
	if out := c.ok("kv", "get", "--prefix", "svc.api."); out != want {
		t.Fatalf("kv get --prefix: %q, want %q", out, want)
	}
	if out := c.ok("kv", "get", "svc.api.", "--prefix", "--keys-only", "--serializable"); out != "svc.api.n1\nsvc.api.n2\nsvc.api.n3\nsvc.api.n4\n" {
		t.Fatalf("kv get --keys-only: %q", out)
	}
	if out := c.ok("kv", "get", "svc.", "--prefix", "--count"); out != "4\n" {
		t.Fatalf("kv get --count: %q", out)
	}
	r := c.expect(cliOK, "kv", "get", "svc.", "--prefix", "--limit", "2")
	if r.stdout != "svc.api.n1 {\"addr\":\"10.0.0.5\"}\nsvc.api.n2 \"42\"\n" || !strings.Contains(r.stderr, "2 of 4 keys shown; continue with --after svc.api.n2") {
		t.Fatalf("kv get --limit 2: %v", r)
	}
	if out := c.ok("kv", "get", "svc.", "--prefix", "--after", "svc.api.n3"); out != "svc.api.n4 null\n" {
		t.Fatalf("kv get --after: %q", out)
	}
	if out := c.ok("kv", "get", "nothing.", "--prefix"); out != "" {
		t.Fatalf("kv get of an empty prefix: %q", out)
	}
	// A missing key is not found (3), with and without --json.
	if r := c.expect(cliNotFound, "kv", "get", "svc.api.n9"); r.stdout != "" || !strings.Contains(r.stderr, "svc.api.n9: not found") {
		t.Fatalf("kv get of a missing key: %v", r)
	}
	c.jsonOut(cliNotFound, "kv.get.reply", &g, "kv", "get", "svc.api.n9")
	if len(g.KVs) != 0 || g.Count != 0 {
		t.Fatalf("kv get --json of a missing key: %+v", g)
	}

	if out := c.ok("kv", "del", "svc.api.n4", "--prev"); out != "deleted 1 at revision 6\nsvc.api.n4 null\n" {
		t.Fatalf("kv del --prev: %q", out)
	}
	var d schema.KVDeleteReply
	c.jsonOut(cliOK, "kv.delete.reply", &d, "kv", "del", "svc.api.", "--prefix")
	if d.Deleted != 3 || d.Revision != 7 {
		t.Fatalf("kv del --prefix --json: %+v", d)
	}
	if out := c.ok("kv", "del", "svc.api.n1"); out != "deleted 0 at revision 7\n" {
		t.Fatalf("kv del of a missing key: %q", out)
	}

	// Transactions from stdin and from a file; a failed compare is exit 0.
	txn := `{"compare":[{"key":"locks.build","target":"create_revision","op":"==","value":0}],
		"success":[{"put":{"key":"locks.build","value":"n1","lease":1}},{"get":{"key":"locks.build"}}],
		"failure":[{"get":{"key":"locks.build"}}]}`
	r = c.run(txn, "kv", "txn")
	if r.code != cliOK || r.stdout != "succeeded: true, revision 8\n[0] put: revision 8\n[1] get: 1 of 1 keys at revision 8\n    locks.build \"n1\"\n" {
		t.Fatalf("kv txn: %v", r)
	}
	r = c.run(txn, "kv", "txn", "--json")
	var tr schema.KVTxnReply
	if r.code != cliOK || schema.Validate("kv.txn.reply", []byte(r.stdout)) != nil {
		t.Fatalf("kv txn --json: %v", r)
	}
	mustUnmarshal(t, []byte(r.stdout), &tr)
	if tr.Succeeded || tr.Revision != 8 || len(tr.Responses) != 1 || tr.Responses[0].Get.KVs[0].Lease != 1 {
		t.Fatalf("kv txn --json of a failing compare: %+v", tr)
	}
	file := filepath.Join(t.TempDir(), "release.json")
	if err := os.WriteFile(file, []byte(`{"compare":[{"key":"locks.build","target":"lease","op":"==","value":1}],"success":[{"delete":{"key":"locks.build"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := c.ok("kv", "txn", "--file", file); out != "succeeded: true, revision 9\n[0] delete: deleted 1 at revision 9\n" {
		t.Fatalf("kv txn --file: %q", out)
	}
	for _, bad := range []string{"", "{", `{"compare":[],"bogus":1}`, `{} {}`} {
		if r := c.run(bad, "kv", "txn"); r.code != cliUsage {
			t.Fatalf("kv txn of %q: %v", bad, r)
		}
	}
	if r := c.run(`{"success":[{"put":{"key":"x.y","value":1,"lease":55}}]}`, "kv", "txn"); r.code != cliNotFound {
		t.Fatalf("kv txn putting to a missing lease: %v", r)
	}
	c.expect(cliUsage, "kv", "txn", "--file", filepath.Join(t.TempDir(), "missing.json"))
	c.expect(cliUsage, "kv")
	c.expect(cliUsage, "kv", "get")
	c.expect(cliUsage, "kv", "get", "a", "--nope")
}

// kv put takes a value too long for an argument ("Argument list too
// long" above 128 KiB on Linux) from stdin ("-") or from --file.
func TestCLIKVPutFromStdinAndFile(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := newCLI(t, n.natsURL)
	dir := t.TempDir()
	get := func(key string) string {
		t.Helper()
		var g schema.KVGetReply
		c.jsonOut(cliOK, "kv.get.reply", &g, "kv", "get", key)
		if len(g.KVs) != 1 {
			t.Fatalf("kv get %s: %+v", key, g)
		}
		return string(g.KVs[0].Value)
	}
	asString := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}

	text := strings.Repeat("concord ", 25600) // 200 KiB of text: a JSON string
	if r := c.run(text, "kv", "put", "big.stdin", "-"); r.code != cliOK || r.stdout != "revision 1\n" {
		t.Fatalf("kv put - of %d bytes: %v", len(text), r)
	}
	if got := get("big.stdin"); got != asString(text) {
		t.Fatalf("kv get big.stdin: %d bytes, want the %d put", len(got), len(asString(text)))
	}
	doc := `{"blob":"` + strings.Repeat("x", 200<<10) + `","n":1}` // JSON: kept as JSON
	file := filepath.Join(dir, "doc.json")
	if err := os.WriteFile(file, []byte(doc+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.ok("kv", "put", "big.file", "--file", file)
	var want bytes.Buffer
	if err := json.Compact(&want, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	if got := get("big.file"); got != want.String() {
		t.Fatalf("kv get big.file: %d bytes, want %d", len(got), want.Len())
	}
	// --file - is stdin; text keeps its final newline.
	if r := c.run("hello\n", "kv", "put", "small", "--file", "-"); r.code != cliOK {
		t.Fatalf("kv put --file -: %v", r)
	}
	if got := get("small"); got != `"hello\n"` {
		t.Fatalf("kv get small: %s", got)
	}

	// The string "-" itself, given as JSON.
	c.ok("kv", "put", "dash", `"-"`)
	if got := get("dash"); got != `"-"` {
		t.Fatalf("kv get dash: %s", got)
	}

	// Errors change nothing.
	keys := func() string { return c.ok("kv", "get", "", "--prefix", "--count") }
	before := keys()
	c.expectUsage("give VALUE or --file, not both", "kv", "put", "k", "v", "--file", file)
	c.expectUsage("missing VALUE", "kv", "put", "k")
	c.expectUsage("read the value", "kv", "put", "k", "--file", filepath.Join(dir, "missing"))
	if r := c.run("\xff\xfe binary", "kv", "put", "k", "-"); r.code != cliUsage || !strings.Contains(r.stderr, "neither JSON nor UTF-8") {
		t.Fatalf("kv put - of bytes that are not UTF-8: %v", r)
	}
	tooLarge := strings.Repeat("y", 1536<<10) // over --max-value-bytes (1 MiB)
	if r := c.run(tooLarge, "kv", "put", "k", "-"); r.code != cliError || !strings.Contains(r.stderr, "too_large") {
		t.Fatalf("kv put - of 1.5 MiB: %v", r)
	}
	// Over NATS's max_payload: refused by the client at once, not
	// retried until --timeout.
	start := time.Now()
	huge := strings.Repeat("z", 3<<20)
	if r := c.run(huge, "kv", "put", "k", "-", "--timeout", "60s"); r.code != cliError || !strings.Contains(r.stderr, "maximum payload") {
		t.Fatalf("kv put - of 3 MiB: %v", r)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("kv put of 3 MiB took %s to fail", took)
	}
	if after := keys(); after != before {
		t.Fatalf("the refused puts changed the keys: %s, then %s", before, after)
	}
	c.expect(cliNotFound, "kv", "get", "k")
}

// The connection and output flags work before the command, between a
// group and its subcommand, and after the arguments.
func TestCLIGlobalFlags(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	dead := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	c := newCLI(t, dead) // so that only --server reaches the node
	u := n.natsURL
	if out := c.ok("--server", u, "status"); !strings.Contains(out, "leader n1") {
		t.Fatalf("concord --server URL status: %q", out)
	}
	c.ok("status", "--server", u)
	c.ok("kv", "--server", u, "put", "g.k", "1")
	c.ok("--server="+u, "kv", "put", "g.k2", "2")
	c.ok("-s", u, "--timeout", "5s", "kv", "put", "g.k3", "3")
	if out := c.ok("--json", "--server", u, "kv", "get", "g.k"); !strings.HasPrefix(out, `{"revision":`) {
		t.Fatalf("concord --json --server URL kv get: %q", out)
	}
	if out := c.ok("kv", "get", "--server", u, "g.", "--prefix", "--count"); out != "3\n" {
		t.Fatalf("kv get --server URL: %q", out)
	}
	if out := c.ok("--server", u, "lock", "g.lock", "--", "echo", "locked"); out != "locked\n" {
		t.Fatalf("concord --server URL lock: %q", out)
	}
	c.ok("--server", u, "lease", "list")
	c.ok("lease", "--server", u, "grant", "10")
	backup := filepath.Join(t.TempDir(), "b.concord")
	c.ok("--server", u, "snapshot", "save", backup)
	c.ok("snapshot", "--server", u, "save", backup)
	c.ok("--json", "snapshot", "status", backup)

	c.expectUsage("flag --bogus before the command", "--bogus", "status")
	c.expectUsage("flag needs an argument: --server", "--server")
	c.expectUsage("missing command after --server", "--server", u)
	c.expectUsage("missing command", "kv", "--server", u)
	c.expectUsage("flag --prefix before the command", "kv", "--prefix", "get", "g.")
	c.expect(cliUnavailable, "--timeout", "500ms", "status")
}

// Every command's -h: the connection flags, and no doubled defaults.
func TestCLIHelp(t *testing.T) {
	t.Parallel()
	c := newCLI(t, "")
	doubled := regexp.MustCompile(`\(default[^)]*\).*\(default`)
	for _, cmd := range [][]string{{"lease", "grant"}, {"lease", "keepalive"}, {"lease", "revoke"}, {"lease", "info"}, {"lease", "list"},
		{"kv", "put"}, {"kv", "get"}, {"kv", "del"}, {"kv", "txn"}, {"watch"}, {"lock"}, {"elect"}, {"status"},
		{"snapshot", "save"}, {"snapshot", "status"}, {"snapshot", "restore"}, {"serve"}, {"bench"}} {
		r := c.run("", append(cmd, "-h")...)
		out := r.stdout + r.stderr
		if r.code != cliOK && !(cmd[0] == "serve" || cmd[0] == "bench") {
			t.Errorf("concord %q -h: %v", cmd, r)
		}
		for _, line := range strings.Split(out, "\n") {
			if doubled.MatchString(line) {
				t.Errorf("concord %q -h: a doubled default: %q", cmd, line)
			}
		}
		if slices.Contains([]string{"lease", "kv", "watch", "lock", "elect", "status"}, cmd[0]) || slices.Equal(cmd, []string{"snapshot", "save"}) {
			for _, flag := range []string{"-server URLS", "-user NAME", "-password PASSWORD", "-token TOKEN", "-creds FILE", "-nkey FILE",
				"-tls-cert FILE", "-tls-key FILE", "-tls-ca FILE", "-context NAME"} {
				if !strings.Contains(out, flag) {
					t.Errorf("concord %q -h lacks %s:\n%s", cmd, flag, out)
				}
			}
		}
	}
	if out := c.ok("watch", "-h"); strings.Contains(out, "(default -1)") || !strings.Contains(out, "-from REV") {
		t.Errorf("concord watch -h:\n%s", out)
	}
	help := c.ok("help")
	for _, want := range []string{"  9    denied:", "--creds FILE", "--tls-ca FILE", "$NATS_CREDS", "before the command"} {
		if !strings.Contains(help, want) {
			t.Errorf("concord help lacks %q", want)
		}
	}
}

func TestCLIConnection(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	dead := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))

	// Nothing listens: unavailable, within the timeout.
	c := newCLI(t, dead)
	start := time.Now()
	r := c.expect(cliUnavailable, "status", "--timeout", "500ms")
	if !strings.Contains(r.stderr, "cannot reach NATS") || time.Since(start) > 5*time.Second {
		t.Fatalf("status against %s: %v after %s", dead, r, time.Since(start))
	}
	c.expect(cliUnavailable, "kv", "get", "a", "--server", dead, "--timeout", "500ms")
	// NATS answers but no Concord does under this prefix: retried until
	// the timeout, then unavailable.
	start = time.Now()
	c.expect(cliUnavailable, "kv", "get", "a", "--server", n.natsURL, "--subject-prefix", "nobody", "--timeout", "700ms")
	if d := time.Since(start); d < 600*time.Millisecond || d > 5*time.Second {
		t.Fatalf("no responders ended after %s", d)
	}
	c.expect(cliUsage, "status", "--subject-prefix", "bad prefix")

	// --server beats $NATS_URL.
	if out := c.ok("status", "--server", n.natsURL); !strings.Contains(out, "leader n1") {
		t.Fatalf("status --server: %q", out)
	}

	// nats contexts: --context, then $NATS_CONTEXT when no server is given.
	xdg := t.TempDir()
	if err := os.MkdirAll(filepath.Join(xdg, "nats", "context"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctxJSON, _ := json.Marshal(map[string]string{"url": n.natsURL})
	if err := os.WriteFile(filepath.Join(xdg, "nats", "context", "concordtest.json"), ctxJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	nc := newCLI(t, "", "XDG_CONFIG_HOME="+xdg)
	nc.ok("status", "--context", "concordtest")
	nc.with("NATS_CONTEXT=concordtest").ok("status")
	nc.with("NATS_CONTEXT=concordtest", "NATS_URL="+dead).expect(cliUnavailable, "status", "--timeout", "500ms")
	nc.with("NATS_URL="+dead).ok("status", "--context", "concordtest")
	// --server replaces the context's URL (and keeps its credentials).
	nc.ok("status", "--context", "concordtest", "--server", n.natsURL)
	nc.expect(cliUnavailable, "status", "--context", "concordtest", "--server", dead, "--timeout", "500ms")
	nc.expect(cliError, "status", "--context", "nosuchcontext")

	// status: the table and the JSON.
	c = newCLI(t, n.natsURL)
	out := c.ok("status")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !regexp.MustCompile(`^cluster \S+: leader n1, term \d+, revision 0, history from revision 0$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^ID +ADDRESS +SUFFRAGE +REACHABLE +STATE +LAST +COMMIT +APPLIED +REVISION$`).MatchString(lines[2]) ||
		!regexp.MustCompile(`^n1\* +127\.0\.0\.1:\d+ +voter +yes +leader +\d+ +\d+ +\d+ +0$`).MatchString(lines[3]) {
		t.Fatalf("status: %q", out)
	}
	var st schema.ClusterStatusReply
	c.jsonOut(cliOK, "cluster.status.reply", &st, "status")
	if st.Leader != "n1" || len(st.Members) != 1 || st.Members[0].Node == nil || !st.Members[0].Reachable {
		t.Fatalf("status --json: %+v", st)
	}
	c.expect(cliUsage, "status", "extra")
}

func TestCLIWatch(t *testing.T) {
	t.Parallel()
	// The old flag name still works.
	n := startNode(t, nodeOpts{flags: []string{"--changes-max", "8"}})
	c := newCLI(t, n.natsURL)
	c.ok("kv", "put", "svc.before", "0") // rev 1

	human := c.start("watch", "svc.", "--prefix")
	human.waitStderr("watching prefix svc. after revision 1", 5*time.Second)
	asJSON := c.start("watch", "svc.", "--prefix", "--json", "--from", "0")
	one := c.start("watch", "svc.b")
	one.waitStderr("watching key svc.b after revision 1", 5*time.Second)

	c.ok("lease", "grant", "30")
	c.ok("kv", "put", "svc.a", `{"addr":"10.0.0.5"}`, "--lease", "1") // rev 2
	c.ok("kv", "put", "other.x", "1")                                 // rev 3, not watched
	c.ok("kv", "put", "svc.b", "two")                                 // rev 4
	c.ok("kv", "del", "svc.b")                                        // rev 5
	c.ok("lease", "revoke", "1")                                      // rev 6

	want := "revision=2 op_index=0 type=put key=svc.a cause=put lease=1 value={\"addr\":\"10.0.0.5\"}\n" +
		"revision=4 op_index=0 type=put key=svc.b cause=put value=\"two\"\n" +
		"revision=5 op_index=0 type=delete key=svc.b cause=delete\n" +
		"revision=6 op_index=0 type=delete key=svc.a cause=lease_revoked lease=1\n"
	human.waitStdout(want, 5*time.Second)
	one.waitStdout("revision=5 op_index=0 type=delete key=svc.b cause=delete\n", 5*time.Second)
	asJSON.waitStdout(`"revision":6`, 5*time.Second)

	human.signal(syscall.SIGINT)
	if code := human.wait(5 * time.Second); code != cliOK || human.stdout.String() != want {
		t.Fatalf("watch: exit %d, stdout %q", code, human.stdout.String())
	}
	if one.stdout.String() != "revision=4 op_index=0 type=put key=svc.b cause=put value=\"two\"\nrevision=5 op_index=0 type=delete key=svc.b cause=delete\n" {
		t.Fatalf("watch svc.b: %q", one.stdout.String())
	}
	one.signal(syscall.SIGTERM)
	asJSON.signal(syscall.SIGTERM)
	if code := asJSON.wait(5 * time.Second); code != cliOK {
		t.Fatalf("watch --json: exit %d", code)
	}
	var revs []int64
	for _, line := range strings.Split(strings.TrimSpace(asJSON.stdout.String()), "\n") {
		if err := schema.Validate("event", []byte(line)); err != nil {
			t.Fatalf("watch --json: %s: %v", line, err)
		}
		var e schema.Event
		mustUnmarshal(t, []byte(line), &e)
		revs = append(revs, e.Revision)
	}
	if fmt.Sprint(revs) != "[1 2 4 5 6]" {
		t.Fatalf("watch --json --from 0: revisions %v", revs)
	}
	one.wait(5 * time.Second)

	// The change log keeps 8 events: after 10, resuming from revision 0 is
	// too late.
	for i := range 4 {
		c.ok("kv", "put", "svc.c", strconv.Itoa(i))
	}
	r := c.expect(cliCompacted, "watch", "svc.", "--prefix", "--from", "0")
	if !strings.Contains(r.stderr, "compacted") || !strings.Contains(r.stderr, "re-read") {
		t.Fatalf("watch from a compacted revision: %v", r)
	}
	c.expect(cliError, "watch", "bad key")
	c.expect(cliUsage, "watch")
}

// lockNotice is the JSON `concord lock --json` prints on stderr once it
// holds the lock.
type lockNotice struct {
	Event        string `json:"event"`
	Key          string `json:"key"`
	Lease        int64  `json:"lease"`
	FencingToken int64  `json:"fencing_token"`
}

func TestCLILock(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := newCLI(t, n.natsURL)

	// The command sees the fencing token; its exit code passes through;
	// the lock is released.
	r := c.expect(cliOK, "lock", "locks.build", "--", "sh", "-c", "echo $CONCORD_FENCING_TOKEN")
	token, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	if err != nil || token <= 0 || !strings.Contains(r.stderr, fmt.Sprintf("fencing token %d", token)) {
		t.Fatalf("lock: %v", r)
	}
	c.expect(cliOK, "kv", "get", "locks.build.", "--prefix", "--count")
	if out := c.ok("kv", "get", "locks.build.", "--prefix", "--count"); out != "0\n" {
		t.Fatalf("lock not released: %q keys", out)
	}
	c.expect(7, "lock", "locks.build", "--", "sh", "-c", "exit 7")
	c.expect(cliError, "lock", "locks.build", "--", filepath.Join(t.TempDir(), "no-such-command"))
	for _, args := range [][]string{{"lock"}, {"lock", "locks.build"}, {"lock", "locks.build", "sh"}, {"lock", "locks.build", "--"}} {
		c.expect(cliUsage, args...)
	}
	// The command's own flags without "--" get the hint, not just "flag
	// provided but not defined"; a name no key can start with is refused
	// before any lease is granted.
	if r := c.expect(cliUsage, "lock", "locks.build", "sh", "-c", "echo hi"); !strings.Contains(r.stderr, `put the command after "--"`) {
		t.Fatalf("lock with the command's flags before --: %v", r)
	}
	leasesBefore := c.ok("lease", "list", "--all")
	if r := c.expect(cliUsage, "lock", "bad name", "--", "true"); !strings.Contains(r.stderr, `lock name "bad name"`) {
		t.Fatalf("lock with a bad name: %v", r)
	}
	if got := c.ok("lease", "list", "--all"); got != leasesBefore {
		t.Fatalf("a lock with a bad name left a lease: %q, before %q", got, leasesBefore)
	}

	// A second lock waits until the first releases, and gets a larger token.
	dir := t.TempDir()
	first := c.start("lock", "locks.build", "--", "sh", "-c", "echo first $CONCORD_FENCING_TOKEN; sleep 1; touch "+dir+"/first-done")
	first.waitStdout("first ", 5*time.Second)
	second := c.start("lock", "locks.build", "--", "sh", "-c", "test -f "+dir+"/first-done && echo second $CONCORD_FENCING_TOKEN")
	if code := first.wait(10 * time.Second); code != cliOK {
		t.Fatalf("first lock: exit %d", code)
	}
	if code := second.wait(10 * time.Second); code != cliOK {
		t.Fatalf("second lock: exit %d, stdout %q", code, second.stdout.String())
	}
	t1, _ := strconv.ParseInt(strings.Fields(first.stdout.String())[1], 10, 64)
	t2, _ := strconv.ParseInt(strings.Fields(second.stdout.String())[1], 10, 64)
	if t1 <= token || t2 <= t1 {
		t.Fatalf("fencing tokens %d, %d, %d do not grow", token, t1, t2)
	}
	if !strings.Contains(second.stderr.String(), "concord lock: waiting for locks.build, held by lease ") {
		t.Fatalf("the second lock did not say whom it waited for: %q", second.stderr.String())
	}

	// SIGINT is forwarded to the command, and the lock is released.
	held := c.start("lock", "locks.build", "--", "sh", "-c", `trap 'echo got INT; kill $!; exit 5' INT; echo ready; sleep 30 & wait`)
	held.waitStdout("ready", 5*time.Second)
	waiter := c.start("lock", "locks.build", "--", "echo", "never")
	checkFor(t, 5*time.Second, 20*time.Millisecond, func() error { // the waiter has queued
		if out := c.ok("kv", "get", "locks.build.", "--prefix", "--count"); out != "2\n" {
			return fmt.Errorf("%q keys under the lock", out)
		}
		return nil
	})
	waiter.signal(syscall.SIGINT) // interrupted while waiting: 128+2, leaves the queue
	if code := waiter.wait(5 * time.Second); code != 130 || waiter.stdout.String() != "" {
		t.Fatalf("interrupted waiter: exit %d, stdout %q", code, waiter.stdout.String())
	}
	held.signal(syscall.SIGINT)
	if code := held.wait(5 * time.Second); code != 5 || !strings.Contains(held.stdout.String(), "got INT") {
		t.Fatalf("lock after SIGINT: exit %d, stdout %q", code, held.stdout.String())
	}
	if out := c.ok("kv", "get", "locks.build.", "--prefix", "--count"); out != "0\n" {
		t.Fatalf("after SIGINT: %q keys under the lock", out)
	}

	// A lost session kills the command and exits 6.
	lost := c.start("lock", "locks.build", "--ttl", "3", "--grace", "1s", "--json", "--", "sh", "-c", `trap 'echo got TERM; kill $!; exit 0' TERM; echo ready; sleep 30 & wait`)
	lost.waitStdout("ready", 5*time.Second)
	var ln lockNotice
	mustUnmarshal(t, []byte(strings.SplitN(lost.stderr.String(), "\n", 2)[0]), &ln)
	if ln.Event != "acquired" || ln.Lease == 0 || ln.FencingToken <= t2 {
		t.Fatalf("lock --json notice: %+v", ln)
	}
	c.ok("lease", "revoke", strconv.FormatInt(ln.Lease, 10))
	if code := lost.wait(10 * time.Second); code != cliLost || !strings.Contains(lost.stdout.String(), "got TERM") || !strings.Contains(lost.stderr.String(), "session lost") {
		t.Fatalf("lock with a lost session: exit %d, stdout %q, stderr %q", code, lost.stdout.String(), lost.stderr.String())
	}
}

func TestCLIElect(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := newCLI(t, n.natsURL)

	// A name no key can start with is refused in the user's words before
	// any lease is granted; so is a value that starts like JSON and is not.
	if r := c.expect(cliUsage, "elect", "bad name", "--proclaim", "x"); !strings.Contains(r.stderr, `election name "bad name"`) {
		t.Fatalf("elect with a bad name: %v", r)
	}
	if r := c.expect(cliUsage, "elect", "jobs", "--proclaim", `{"a":`); !strings.Contains(r.stderr, "starts like JSON") {
		t.Fatalf("elect with broken JSON: %v", r)
	}
	if out := c.ok("lease", "list", "--all"); strings.Contains(out, "lease ") {
		t.Fatalf("a refused elect left a lease: %q", out)
	}

	observer := c.start("elect", "jobs")
	observer.waitStdout("no leader\n", 5*time.Second)
	jsonObserver := c.start("elect", "jobs", "--json")
	jsonObserver.waitStdout("null\n", 5*time.Second)

	w1 := c.start("elect", "jobs", "--proclaim", "w1")
	w1.waitStdout("leading jobs: key=jobs.", 5*time.Second)
	if !strings.HasSuffix(w1.stdout.String(), ` value="w1"`+"\n") {
		t.Fatalf("elect --proclaim w1: %q", w1.stdout.String())
	}
	observer.waitStdout(`value="w1"`, 5*time.Second)

	// A second candidate waits until the first resigns.
	w2 := c.start("elect", "jobs", "--proclaim", `{"worker":2}`, "--json")
	w2.waitStderr("campaigning for jobs", 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	if out := w2.stdout.String(); out != "" {
		t.Fatalf("a second candidate leads while the first does: %q", out)
	}
	w1.signal(syscall.SIGINT)
	if code := w1.wait(5 * time.Second); code != cliOK {
		t.Fatalf("elect --proclaim w1 after SIGINT: exit %d", code)
	}
	w2.waitStdout("\n", 5*time.Second)
	var kv schema.KeyValue
	mustUnmarshal(t, []byte(w2.stdout.String()), &kv)
	if string(kv.Value) != `{"worker":2}` || kv.Lease == 0 {
		t.Fatalf("elect --proclaim --json: %+v", kv)
	}
	observer.waitStdout(`value={"worker":2}`, 5*time.Second)
	jsonObserver.waitStdout(`"value":{"worker":2}`, 5*time.Second)

	// Losing the session ends leadership with exit 6.
	c.ok("lease", "revoke", strconv.FormatInt(kv.Lease, 10))
	if code := w2.wait(15 * time.Second); code != cliLost {
		t.Fatalf("elect with a lost session: exit %d, stderr %q", code, w2.stderr.String())
	}
	observer.waitStdout("no leader\n", 5*time.Second)

	observer.signal(syscall.SIGINT)
	jsonObserver.signal(syscall.SIGTERM)
	if code := observer.wait(5 * time.Second); code != cliOK {
		t.Fatalf("observer: exit %d", code)
	}
	// A candidate writes its key, then its value again (Campaign's
	// Proclaim), so an observer may see a leader twice.
	lines := strings.Split(strings.TrimSpace(observer.stdout.String()), "\n")
	if len(lines) < 4 || lines[0] != "no leader" || lines[len(lines)-1] != "no leader" {
		t.Fatalf("observer: %q", lines)
	}
	for _, l := range lines[1 : len(lines)-1] {
		if !strings.HasPrefix(l, "leader key=jobs.") {
			t.Fatalf("observer: %q", lines)
		}
	}
	if code := jsonObserver.wait(5 * time.Second); code != cliOK {
		t.Fatalf("json observer: exit %d", code)
	}
	c.expect(cliUsage, "elect", "bad name") // refused before it asks the server
	c.expect(cliUsage, "elect")
}
