package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/nats-io/nuid"

	"github.com/concord-io/concord/tests/freeport"
)

// The client commands against a NATS that wants credentials: every
// command with --user/--password, --nkey, --creds (NATS operator mode),
// and TLS client certificates with a token; the environment variables and
// nats contexts that give the same; refused credentials; and permission
// violations, which exit 9 at once instead of retrying until --timeout.

// cliDenied is the exit code of refused credentials and permission
// violations.
const cliDenied = 9

// authRoles are the permissions of the roles the tests use. NODE serves
// (deploy/nats/roles.conf's replica role); APP may run every client
// command; NOPUT may read but not put or grant, and may not subscribe to
// watch subjects; NOINBOX may publish everything but cannot receive
// replies.
var authRoles = map[string]string{
	"NODE": `{
    publish: { allow: ["concord.watch.>", "concord.cluster.>"] }
    subscribe: { allow: ["concord.lease.*", "concord.kv.*", "concord.cluster.>", "$SRV.>", "_INBOX.>"] }
    allow_responses: true
  }`,
	"APP": `{
    publish: { allow: ["concord.lease.*", "concord.kv.*", "concord.cluster.status", "concord.cluster.backup", "concord.cluster.backup.chunk"] }
    subscribe: { allow: ["_INBOX.>", "concord.watch.>"] }
  }`,
	"NOPUT": `{
    publish: { allow: ["concord.lease.*", "concord.kv.*"], deny: ["concord.kv.put", "concord.lease.grant"] }
    subscribe: { allow: ["_INBOX.>"] }
  }`,
	"NOINBOX": `{
    publish: { allow: ["concord.>"] }
    subscribe: { allow: ["concord.watch.>"] }
  }`,
}

// authorization is a nats-server authorization block with the roles
// (nats-server refuses a role no user refers to) and the users, one a line.
func authorization(roles []string, users ...string) string {
	var b strings.Builder
	b.WriteString("authorization {\n")
	for _, r := range roles {
		fmt.Fprintf(&b, "  %s = %s\n", r, authRoles[r])
	}
	b.WriteString("  users = [\n")
	for _, u := range users {
		fmt.Fprintf(&b, "    %s\n", u)
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// authNode is a node whose NATS wants credentials, and how to get in.
type authNode struct {
	url string
	dir string
}

// writeFile writes a test file readable by the owner only.
func writeFile(t *testing.T, path, body string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startAuthNode starts a node with the nats-server configuration body
// (listen is added) and the node's own credentials in nodeArgs; ready
// connects with opts.
func startAuthNode(t *testing.T, body string, nodeArgs []string, scheme string, opts ...nats.Option) *authNode {
	t.Helper()
	dir := t.TempDir()
	port := freeport.Port(t)
	conf := writeFile(t, filepath.Join(dir, "nats.conf"), fmt.Sprintf("listen: 127.0.0.1:%d\n%s", port, body))
	url := fmt.Sprintf("%s://127.0.0.1:%d", scheme, port)
	args := append([]string{"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-config", conf}, nodeArgs...)
	opts = append(opts, nats.Timeout(2*time.Second))
	startSecuredNode(t, dir, "n1", url, args, func() error {
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			return err
		}
		defer nc.Close()
		_, e, err := request(nc, "concord.lease.list", map[string]any{}, "", time.Second)
		if e != nil {
			return e
		}
		return err
	})
	return &authNode{url: url, dir: dir}
}

// nkeySeed makes a user nkey and writes its seed to a file.
func nkeySeed(t *testing.T, path string) (seedFile, public string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, path, string(seed)+"\n"), pub
}

// placer puts the connection flags before the command, between the group
// and its subcommand, or after the arguments, in turn.
type placer struct {
	conn []string
	n    int
}

func (p *placer) args(cmd ...string) []string {
	p.n++
	var out []string
	switch p.n % 3 {
	case 0:
		out = append(append(out, p.conn...), cmd...)
	case 1:
		out = append(append(append(out, cmd[0]), p.conn...), cmd[1:]...)
	default:
		out = append(append(out, cmd...), p.conn...)
	}
	return out
}

// everyCommand runs each client command once with the connection flags
// conn, and fails unless each succeeds. NATS refuses connections without
// credentials, so a success means the flags were used.
func everyCommand(t *testing.T, c *cli, tag string, conn []string) {
	t.Helper()
	p := &placer{conn: conn}
	key := "auth." + tag + ".k"
	grant := c.ok(p.args("lease", "grant", "60")...)
	m := regexp.MustCompile(`^lease (\d+) granted`).FindStringSubmatch(grant)
	if m == nil {
		t.Fatalf("lease grant: %q", grant)
	}
	id := m[1]
	c.ok(p.args("lease", "keepalive", id)...)
	c.ok(p.args("lease", "info", id)...)
	c.ok(p.args("lease", "list")...)
	c.ok(p.args("kv", "put", key, "v1", "--lease", id)...)
	if out := c.ok(p.args("kv", "get", key)...); out != key+` "v1"`+"\n" {
		t.Fatalf("kv get: %q", out)
	}
	txn := fmt.Sprintf(`{"success":[{"put":{"key":%q,"value":2}}]}`, key+".txn")
	if r := c.run(txn, p.args("kv", "txn")...); r.code != cliOK {
		t.Fatalf("kv txn: %v", r)
	}
	w := c.start(p.args("watch", key, "--from", "0")...)
	w.waitStdout("key="+key, 20*time.Second)
	w.signal(syscall.SIGINT)
	if code := w.wait(20 * time.Second); code != cliOK {
		t.Fatalf("watch: exit %d", code)
	}
	if out := c.ok(append(p.args("lock", "auth."+tag+".lock"), "--", "echo", "locked")...); out != "locked\n" {
		t.Fatalf("lock: %q", out)
	}
	obs := c.start(p.args("elect", "auth."+tag+".e")...)
	obs.waitStdout("no leader", 20*time.Second)
	lead := c.start(p.args("elect", "auth."+tag+".e", "--proclaim", "me")...)
	lead.waitStdout("leading", 20*time.Second)
	obs.waitStdout(`value="me"`, 20*time.Second)
	for _, b := range []*bgCLI{lead, obs} {
		b.signal(syscall.SIGINT)
		if code := b.wait(20 * time.Second); code != cliOK {
			t.Fatalf("elect %q: exit %d", b.args, code)
		}
	}
	c.ok(p.args("kv", "del", key)...)
	c.ok(p.args("lease", "revoke", id)...)
	if out := c.ok(p.args("status")...); !strings.Contains(out, "leader n1") {
		t.Fatalf("status: %q", out)
	}
	backup := filepath.Join(t.TempDir(), "backup.concord")
	c.ok(p.args("snapshot", "save", backup)...)
	c.ok("snapshot", "status", backup)
}

// expectRefused runs concord, which must exit 9 with want in its error.
func (c *cli) expectRefused(want string, args ...string) {
	c.t.Helper()
	r := c.expect(cliDenied, args...)
	if !strings.Contains(r.stderr, want) {
		c.t.Fatalf("concord %q: %v; want %q on stderr", args, r, want)
	}
}

// expectUsage runs concord, which must exit 2 with want in its error.
func (c *cli) expectUsage(want string, args ...string) {
	c.t.Helper()
	r := c.expect(cliUsage, args...)
	if !strings.Contains(r.stderr, want) {
		c.t.Fatalf("concord %q: %v; want %q on stderr", args, r, want)
	}
}

// writeContext writes a nats context under xdg.
func writeContext(t *testing.T, xdg, name string, settings map[string]string) {
	t.Helper()
	dir := filepath.Join(xdg, "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(settings)
	writeFile(t, filepath.Join(dir, name+".json"), string(data))
}

// Users with passwords and an nkey user: every command with each, the
// environment variables, nats contexts and which of them wins, refused
// credentials, and the usage errors of the credential flags.
func TestCLIUserPasswordAndNkey(t *testing.T) {
	t.Parallel()
	appPassword, nodePassword := "app-"+nuid.Next(), "node-"+nuid.Next()
	dir := t.TempDir()
	seedFile, nkeyPub := nkeySeed(t, filepath.Join(dir, "app.nk"))
	strangerSeed, _ := nkeySeed(t, filepath.Join(dir, "stranger.nk"))
	body := authorization([]string{"NODE", "APP"},
		fmt.Sprintf("{ user: node, password: %q, permissions: $NODE }", nodePassword),
		fmt.Sprintf("{ user: app, password: %q, permissions: $APP }", appPassword),
		fmt.Sprintf("{ nkey: %s, permissions: $APP }", nkeyPub))
	n := startAuthNode(t, body, []string{"--nats-user", "node", "--nats-password", nodePassword}, "nats", nats.UserInfo("app", appPassword))
	c := newCLI(t, n.url)

	t.Run("user and password", func(t *testing.T) {
		c := newCLI(t, n.url)
		everyCommand(t, c, "user", []string{"--user", "app", "--password", appPassword})
	})
	t.Run("nkey", func(t *testing.T) {
		c := newCLI(t, n.url)
		everyCommand(t, c, "nkey", []string{"--nkey", seedFile})
	})

	// Refused: nothing, a wrong password, an nkey the server does not know.
	c.expectRefused("refused the connection without credentials", "status")
	c.expectRefused(`refused the connection as user "app" (--user)`, "kv", "get", "k", "--user", "app", "--password", "wrong")
	c.expectRefused("refused the connection with the nkey "+strangerSeed, "kv", "get", "k", "--nkey", strangerSeed)
	r := c.expect(cliDenied, "status", "--user", "app", "--password", "wrong")
	if strings.Contains(r.stderr, "wrong") || !strings.Contains(strings.ToLower(r.stderr), "authorization violation") {
		t.Fatalf("wrong password: %v (the message names the violation and never the password)", r)
	}

	// The environment variables.
	c.with("NATS_USER=app", "NATS_PASSWORD="+appPassword).ok("status")
	c.with("NATS_NKEY="+seedFile).ok("kv", "get", "--prefix", "")
	// Flags beat the environment, whole: --nkey with a wrong $NATS_PASSWORD.
	c.with("NATS_USER=app", "NATS_PASSWORD=wrong").ok("status", "--nkey", seedFile)
	c.with("NATS_USER=app", "NATS_PASSWORD=wrong").ok("status", "--user", "app", "--password", appPassword)

	// nats contexts.
	xdg := t.TempDir()
	writeContext(t, xdg, "good", map[string]string{"url": n.url, "user": "app", "password": appPassword})
	writeContext(t, xdg, "badpw", map[string]string{"url": n.url, "user": "app", "password": "wrong"})
	writeContext(t, xdg, "stranger", map[string]string{"url": n.url, "nkey": strangerSeed})
	nc := newCLI(t, "", "XDG_CONFIG_HOME="+xdg)
	nc.ok("status", "--context", "good")
	nc.expectRefused(`with the credentials of nats context "badpw"`, "status", "--context", "badpw")
	// Flags override a context's credentials, as a set: a --user and
	// --password replace a context's nkey rather than join it.
	nc.ok("status", "--context", "badpw", "--password", appPassword, "--user", "app")
	nc.ok("status", "--context", "stranger", "--user", "app", "--password", appPassword)
	nc.ok("status", "--context", "badpw", "--nkey", seedFile)
	// --context beats the environment; the environment beats $NATS_CONTEXT.
	nc.with("NATS_USER=app", "NATS_PASSWORD=wrong").ok("status", "--context", "good")
	nc.with("NATS_CONTEXT=good", "NATS_USER=app", "NATS_PASSWORD=wrong").expectRefused(`as user "app" ($NATS_USER)`, "status")
	nc.with("NATS_CONTEXT=badpw", "NATS_NKEY="+seedFile).ok("status")
	// --server replaces the context's URL and keeps its credentials.
	dead := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	writeContext(t, xdg, "elsewhere", map[string]string{"url": dead, "user": "app", "password": appPassword})
	nc.expect(cliUnavailable, "status", "--context", "elsewhere", "--timeout", "500ms")
	nc.ok("status", "--context", "elsewhere", "--server", n.url)

	// Usage errors, before any connection.
	c.expectUsage("--password needs --user", "status", "--password", appPassword)
	c.with("NATS_PASSWORD=x").expectUsage("$NATS_PASSWORD needs $NATS_USER", "status")
	c.expectUsage("give one kind of credentials, not --user and --nkey", "status", "--user", "app", "--password", "x", "--nkey", seedFile)
	c.expectUsage("--nkey "+filepath.Join(dir, "missing.nk"), "status", "--nkey", filepath.Join(dir, "missing.nk"))
	c.expectUsage("--nkey "+writeFile(t, filepath.Join(dir, "junk.nk"), "not a seed\n"), "status", "--nkey", filepath.Join(dir, "junk.nk"))
	c.with("NATS_NKEY="+filepath.Join(dir, "missing.nk")).expectUsage("$NATS_NKEY "+filepath.Join(dir, "missing.nk"), "status")
	// The nats CLI's spellings of a flag are one flag.
	c.expectUsage("give --tls-cert and --tls-key together", "status", "--tlscert", seedFile)
}

// A NATS that wants TLS with a client certificate and a token: every
// command with --tls-ca, --tls-cert, --tls-key and --token; the nats CLI's
// spellings, the environment variables and a nats context; and the
// errors without each.
func TestCLITLSAndToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newPKI(t, dir, "nats")
	serverCert, serverKey := ca.issue(t, "server")
	clientCert, clientKey := ca.issue(t, "client")
	other := newPKI(t, dir, "other")
	strangerCert, strangerKey := other.issue(t, "stranger")
	token := "token-" + nuid.Next()
	body := fmt.Sprintf(`tls {
  cert_file: %q
  key_file: %q
  ca_file: %q
  verify: true
}
authorization { token: %q }
`, serverCert, serverKey, ca.caFile, token)
	n := startAuthNode(t, body, []string{"--nats-token", token}, "tls",
		nats.ClientCert(clientCert, clientKey), nats.RootCAs(ca.caFile), nats.Token(token))
	tlsFlags := []string{"--tls-ca", ca.caFile, "--tls-cert", clientCert, "--tls-key", clientKey}

	t.Run("every command", func(t *testing.T) {
		everyCommand(t, newCLI(t, n.url), "tls", append(tlsFlags, "--token", token))
	})

	c := newCLI(t, n.url)
	// The nats CLI's spellings; --user alone is a token, as in the nats CLI.
	c.ok("status", "--tlsca", ca.caFile, "--tlscert", clientCert, "--tlskey", clientKey, "--user", token)
	c.with("NATS_CA="+ca.caFile, "NATS_CERT="+clientCert, "NATS_KEY="+clientKey, "NATS_TOKEN="+token).ok("status")
	xdg := t.TempDir()
	writeContext(t, xdg, "tls", map[string]string{"url": n.url, "ca": ca.caFile, "cert": clientCert, "key": clientKey, "token": token})
	writeContext(t, xdg, "wrongca", map[string]string{"url": n.url, "ca": other.caFile, "cert": strangerCert, "key": strangerKey, "token": token})
	nc := newCLI(t, "", "XDG_CONFIG_HOME="+xdg)
	nc.ok("status", "--context", "tls")
	nc.ok("status", "--context", "wrongca", "--tls-ca", ca.caFile, "--tls-cert", clientCert, "--tls-key", clientKey)

	// Without each part.
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no CA", []string{"--tls-cert", clientCert, "--tls-key", clientKey, "--token", token}, cliError, "--tls-ca"},
		{"another CA", []string{"--tls-ca", other.caFile, "--tls-cert", clientCert, "--tls-key", clientKey, "--token", token}, cliError, "certificate"},
		{"no client certificate", []string{"--tls-ca", ca.caFile, "--token", token}, cliError, "TLS"},
		{"a client certificate of another CA", []string{"--tls-ca", ca.caFile, "--tls-cert", strangerCert, "--tls-key", strangerKey, "--token", token}, cliError, "TLS"},
		{"no token", tlsFlags, cliDenied, "refused the connection without credentials"},
		{"a wrong token", append(tlsFlags, "--token", "wrong"), cliDenied, "refused the connection with a token (--token)"},
	} {
		r := c.run("", append([]string{"status", "--timeout", "3s"}, tc.args...)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: %v; want exit %d and %q", tc.name, r, tc.code, tc.want)
		}
	}
	c.expectUsage("--tls-ca "+filepath.Join(dir, "missing.pem"), "status", "--tls-ca", filepath.Join(dir, "missing.pem"))
	c.expectUsage("--tls-cert "+clientCert+", --tls-key "+strangerKey, "status", "--tls-cert", clientCert, "--tls-key", strangerKey)
	c.expectUsage("give --tls-cert and --tls-key together", "status", "--tls-key", clientKey)
	c.expectUsage("give one kind of credentials, not --user and --token", "status", "--user", "x", "--token", token)
}

// operatorSetup makes an operator, an account and users for NATS operator
// (JWT) mode, and returns the server configuration and the credentials
// files of the node and of a client.
func operatorSetup(t *testing.T, dir string) (conf, nodeCreds, appCreds string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	op, err := nkeys.CreateOperator()
	must(err)
	opPub, err := op.PublicKey()
	must(err)
	opJWT, err := jwt.NewOperatorClaims(opPub).Encode(op)
	must(err)
	acc, err := nkeys.CreateAccount()
	must(err)
	accPub, err := acc.PublicKey()
	must(err)
	accJWT, err := jwt.NewAccountClaims(accPub).Encode(op)
	must(err)
	creds := func(name string, pub, sub []string) string {
		u, err := nkeys.CreateUser()
		must(err)
		uPub, err := u.PublicKey()
		must(err)
		seed, err := u.Seed()
		must(err)
		claims := jwt.NewUserClaims(uPub)
		claims.Name = name
		claims.Pub.Allow.Add(pub...)
		claims.Sub.Allow.Add(sub...)
		if name == "node" {
			claims.Resp = &jwt.ResponsePermission{MaxMsgs: 1}
		}
		uJWT, err := claims.Encode(acc)
		must(err)
		data, err := jwt.FormatUserConfig(uJWT, seed)
		must(err)
		return writeFile(t, filepath.Join(dir, name+".creds"), string(data))
	}
	nodeCreds = creds("node", []string{"concord.watch.>", "concord.cluster.>"},
		[]string{"concord.lease.*", "concord.kv.*", "concord.cluster.>", "$SRV.>", "_INBOX.>"})
	appCreds = creds("app", []string{"concord.lease.*", "concord.kv.*", "concord.cluster.status", "concord.cluster.backup", "concord.cluster.backup.chunk"},
		[]string{"_INBOX.>", "concord.watch.>"})
	opFile := writeFile(t, filepath.Join(dir, "operator.jwt"), opJWT)
	conf = fmt.Sprintf("operator: %q\nresolver: MEMORY\nresolver_preload: {\n  %s: %q\n}\n", opFile, accPub, accJWT)
	return conf, nodeCreds, appCreds
}

// NATS in operator mode: every command with --creds, $NATS_CREDS and a
// context's creds, and the errors of missing and malformed files.
func TestCLICreds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf, nodeCreds, appCreds := operatorSetup(t, dir)
	n := startAuthNode(t, conf, []string{"--nats-creds", nodeCreds}, "nats", nats.UserCredentials(appCreds))

	t.Run("every command", func(t *testing.T) {
		everyCommand(t, newCLI(t, n.url), "creds", []string{"--creds", appCreds})
	})
	c := newCLI(t, n.url)
	c.with("NATS_CREDS=" + appCreds).ok("status")
	xdg := t.TempDir()
	writeContext(t, xdg, "op", map[string]string{"url": n.url, "creds": appCreds})
	newCLI(t, "", "XDG_CONFIG_HOME="+xdg).ok("status", "--context", "op")

	c.expectRefused("refused the connection without credentials", "status")
	missing := filepath.Join(dir, "missing.creds")
	c.expectUsage("--creds "+missing, "status", "--creds", missing)
	c.expectUsage("--creds "+missing, "kv", "get", "k", "--creds", missing)
	junk := writeFile(t, filepath.Join(dir, "junk.creds"), "not a credentials file\n")
	c.expectUsage("--creds "+junk, "status", "--creds", junk)
	// A JWT without the seed that goes with it.
	jwtOnly := filepath.Join(dir, "jwt-only.creds")
	data, err := os.ReadFile(appCreds)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, jwtOnly, strings.Split(string(data), "------END NATS USER JWT------")[0]+"------END NATS USER JWT------\n")
	c.expectUsage("--creds "+jwtOnly+": no nkey seed", "status", "--creds", jwtOnly)
}

// Permission violations end a command at once with exit 9 and the
// server's words, for a refused publish (a request), a refused
// subscription (watch), and refused replies (the inbox); the --timeout of
// a minute is never waited out.
func TestCLIPermissionDenied(t *testing.T) {
	t.Parallel()
	nodePassword, pw := "node-"+nuid.Next(), "pw-"+nuid.Next()
	body := authorization([]string{"NODE", "APP", "NOPUT", "NOINBOX"},
		fmt.Sprintf("{ user: node, password: %q, permissions: $NODE }", nodePassword),
		fmt.Sprintf("{ user: app, password: %q, permissions: $APP }", pw),
		fmt.Sprintf("{ user: noput, password: %q, permissions: $NOPUT }", pw),
		fmt.Sprintf("{ user: noinbox, password: %q, permissions: $NOINBOX }", pw))
	n := startAuthNode(t, body, []string{"--nats-user", "node", "--nats-password", nodePassword}, "nats", nats.UserInfo("app", pw))
	app := newCLI(t, n.url, "NATS_USER=app", "NATS_PASSWORD="+pw)
	app.ok("kv", "put", "perm.k", "1")
	noput := newCLI(t, n.url, "NATS_USER=noput", "NATS_PASSWORD="+pw)
	noinbox := newCLI(t, n.url, "NATS_USER=noinbox", "NATS_PASSWORD="+pw)
	// What the role may do works...
	if out := noput.ok("kv", "get", "perm.k"); out != "perm.k 1\n" {
		t.Fatalf("kv get: %q", out)
	}

	// ... and what it may not is refused at once.
	const bound = 20 * time.Second // far below the --timeout of 60 s
	for _, tc := range []struct {
		c    *cli
		args []string
		want string
	}{
		{noput, []string{"kv", "put", "perm.k", "2"}, `Permissions Violation for Publish to "concord.kv.put"`},
		{noput, []string{"lease", "grant", "10"}, `Permissions Violation for Publish to "concord.lease.grant"`},
		{noput, []string{"lock", "perm.lock", "--", "true"}, `Publish to "concord.lease.grant"`},
		{noput, []string{"status"}, `Publish to "concord.cluster.status"`},
		{noput, []string{"snapshot", "save", filepath.Join(t.TempDir(), "b")}, `Publish to "concord.cluster.backup"`},
		{noput, []string{"watch", "perm.k"}, `Permissions Violation for Subscription to "concord.watch.perm.k"`},
		{noput, []string{"watch", "perm.", "--prefix"}, `Subscription to "concord.watch.perm.>"`},
		{noput, []string{"elect", "perm.e"}, `Subscription to "concord.watch.perm.e.>"`},
		{noinbox, []string{"status"}, `Permissions Violation for Subscription to "_INBOX.`},
		{noinbox, []string{"kv", "get", "perm.k"}, `Subscription to "_INBOX.`},
	} {
		start := time.Now()
		args := append(tc.args[:len(tc.args):len(tc.args)], "--timeout", "60s")
		if tc.args[0] == "lock" {
			args = append([]string{"--timeout", "60s"}, tc.args...)
		}
		r := tc.c.run("", args...)
		took := time.Since(start)
		if r.code != cliDenied || !strings.Contains(r.stderr, "permission denied") || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("concord %q: %v; want exit %d with %q", args, r, cliDenied, tc.want)
		}
		if n := strings.Count(r.stderr, "Permissions Violation"); n != 1 {
			t.Errorf("concord %q: stderr %q tells of the violation %d times, want once", args, r.stderr, n)
		}
		if took > bound {
			t.Errorf("concord %q took %s to report the refusal", args, took)
		}
	}
	// Nothing changed.
	if out := app.ok("kv", "get", "perm.k"); out != "perm.k 1\n" {
		t.Fatalf("kv get after the refusals: %q", out)
	}
	// The JSON output of a refusal is the message on stderr; stdout stays
	// empty, since no reply came.
	r := noput.expect(cliDenied, "kv", "put", "perm.k", "3", "--json")
	if r.stdout != "" {
		t.Fatalf("kv put --json refused: stdout %q", r.stdout)
	}
}
