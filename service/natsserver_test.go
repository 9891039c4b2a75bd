package service

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/internal/testca"
	"github.com/concord-io/concord/service/loglimit"
)

// writeConf writes a nats-server configuration file for a test.
func writeConf(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// natsOpts runs embeddedNATSOptions on cfg (after fillDefaults) and
// returns the options and what was logged.
func natsOpts(t *testing.T, cfg Config) (*server.Options, string, error) {
	t.Helper()
	var logs strings.Builder
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg.fillDefaults()
	opts, err := embeddedNATSOptions(&cfg, cfg.Logger)
	return opts, logs.String(), err
}

func TestEmbeddedNATSOptionsWithoutFile(t *testing.T) {
	opts, _, err := natsOpts(t, Config{NodeID: "n7", NATSListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if !opts.NoSigs || opts.Host != "127.0.0.1" || opts.Port != server.RANDOM_PORT || opts.ServerName != "concord-n7" {
		t.Fatalf("options %+v", opts)
	}
	if opts.MaxPayload != 2<<20+payloadHeadroom || opts.MaxPending != 64<<20 {
		t.Fatalf("max_payload %d, max_pending %d", opts.MaxPayload, opts.MaxPending)
	}
	opts, _, err = natsOpts(t, Config{})
	if err != nil || opts.Host != defaultNATSHost || opts.Port != defaultNATSPort {
		t.Fatalf("default listen: %s:%d, %v", opts.Host, opts.Port, err)
	}
	// Routes to a cut-off server are declared dead within seconds, not
	// NATS's half a minute or more.
	if opts.Cluster.PingInterval != routePingInterval || opts.Cluster.MaxPingsOut != routeMaxPingsOut {
		t.Fatalf("route pings every %s, %d missed: want %s, %d", opts.Cluster.PingInterval, opts.Cluster.MaxPingsOut, routePingInterval, routeMaxPingsOut)
	}
}

// A --nats-config that chooses its own route pings keeps them.
func TestEmbeddedNATSRoutePingsFromFile(t *testing.T) {
	conf := writeConf(t, `
cluster {
  listen: 127.0.0.1:16222
  ping_interval: "7s"
  ping_max: 5
}
`)
	opts, _, err := natsOpts(t, Config{NATSConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Cluster.PingInterval != 7*time.Second || opts.Cluster.MaxPingsOut != 5 {
		t.Fatalf("route pings every %s, %d missed: want the file's 7s, 5", opts.Cluster.PingInterval, opts.Cluster.MaxPingsOut)
	}
}

func TestEmbeddedNATSOptionsFromFile(t *testing.T) {
	conf := writeConf(t, `
listen: 127.0.0.1:14222
server_name: edge-1
max_payload: 8KB
max_pending: 16KB
debug: true
authorization {
  users = [ {user: a, password: secret} ]
}
cluster {
  name: fromfile
  listen: 127.0.0.1:16222
}
`)
	// Without --nats-listen the file's address wins.
	opts, logs, err := natsOpts(t, Config{NATSConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Host != "127.0.0.1" || opts.Port != 14222 {
		t.Fatalf("listen %s:%d, want the file's", opts.Host, opts.Port)
	}
	if !opts.NoSigs || !opts.Debug || opts.ServerName != "edge-1" || len(opts.Users) != 1 {
		t.Fatalf("options %+v", opts)
	}
	// max_payload below what a value needs is raised, and max_pending with it.
	if opts.MaxPayload != 2<<20+payloadHeadroom || opts.MaxPending != int64(opts.MaxPayload) {
		t.Fatalf("max_payload %d, max_pending %d", opts.MaxPayload, opts.MaxPending)
	}
	if !strings.Contains(logs, "max_payload of --nats-config is below") || !strings.Contains(logs, "max_pending of --nats-config is below") {
		t.Fatalf("no warnings about raised limits: %s", logs)
	}
	if opts.Cluster.Name != "fromfile" || opts.Cluster.Port != 16222 {
		t.Fatalf("cluster %+v", opts.Cluster)
	}

	// Flags given explicitly override the file.
	opts, _, err = natsOpts(t, Config{NATSConfigFile: conf, NATSListen: "127.0.0.2:0",
		NATSClusterListen: "127.0.0.1:17222", NATSRoutes: []string{"nats://127.0.0.1:18222"}})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Host != "127.0.0.2" || opts.Port != server.RANDOM_PORT {
		t.Fatalf("listen %s:%d, want --nats-listen's", opts.Host, opts.Port)
	}
	if opts.Cluster.Port != 17222 || opts.Cluster.Name != "fromfile" || len(opts.Routes) != 1 || opts.Routes[0].Port() != "18222" {
		t.Fatalf("cluster %+v routes %v", opts.Cluster, opts.Routes)
	}

	// A file that sets no address listens where Concord does by default;
	// a large enough max_payload is kept.
	conf = writeConf(t, "max_payload: 4MB\n")
	opts, _, err = natsOpts(t, Config{NATSConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Host != defaultNATSHost || opts.Port != defaultNATSPort || opts.MaxPayload != 4<<20 || opts.ServerName != "concord-n1" {
		t.Fatalf("options %+v", opts)
	}
}

func TestEmbeddedNATSOptionsErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		conf string // file contents; "" for a file that does not exist
		want string
	}{
		{"missing file", "", "no such file"},
		{"syntax error", "authorization {\n  users = [\n", "nats.conf"},
		{"bad value", "listen: 127.0.0.1:4222\nport: \"x\"\n", "nats.conf"},
		{"jetstream", "jetstream: enabled\n", "enables JetStream"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, "absent.conf")
			if c.conf != "" {
				path = writeConf(t, c.conf)
			}
			_, _, err := natsOpts(t, Config{NATSConfigFile: path})
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--nats-config") {
				t.Fatalf("error %v, want ErrConfig mentioning --nats-config and %q", err, c.want)
			}
			// Start fails before anything listens.
			_, err = Start(Config{NATSConfigFile: path, DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0",
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("Start: %v, want ErrConfig", err)
			}
		})
	}
	cfg := Config{NATSURL: "nats://127.0.0.1:4222", NATSConfigFile: filepath.Join(dir, "x.conf")}
	cfg.fillDefaults()
	if err := cfg.validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("--nats-url with --nats-config: %v", err)
	}
}

func TestNATSConnectErrorNamesCredentials(t *testing.T) {
	err := natsConnectError("nats://127.0.0.1:4222", true, fmt.Errorf("wrapped: %w", nats.ErrAuthorization))
	if !errors.Is(err, nats.ErrAuthorization) || !strings.Contains(err.Error(), "--nats-user") || !strings.Contains(err.Error(), "embedded server") {
		t.Fatalf("error %v", err)
	}
	err = natsConnectError("nats://x:4222", false, nats.ErrNoServers)
	if !errors.Is(err, nats.ErrNoServers) || strings.Contains(err.Error(), "--nats-user") {
		t.Fatalf("error %v", err)
	}
}

func TestNATSAuthOptionsCheckFiles(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := testca.New(t, dir, "nats")
	good := ca.Issue(t, dir, "client")
	cases := []struct {
		name string
		auth NATSAuth
		want string
	}{
		{"creds missing", NATSAuth{CredsFile: missing}, "nats creds"},
		{"nkey missing", NATSAuth{NkeyFile: missing}, "nats nkey"},
		{"cert without key", NATSAuth{TLSCert: good.CertFile}, "both --nats-tls-cert and --nats-tls-key"},
		{"key without cert", NATSAuth{TLSKey: good.KeyFile}, "both --nats-tls-cert and --nats-tls-key"},
		{"cert missing", NATSAuth{TLSCert: missing, TLSKey: good.KeyFile}, "nats client certificate"},
		{"CA missing", NATSAuth{TLSCA: missing}, "nats CA"},
		{"CA not PEM", NATSAuth{TLSCA: notPEM}, "nats CA"},
	}
	for _, c := range cases {
		if _, err := c.auth.options(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	opts, err := NATSAuth{User: "a", Password: "b", TLSCert: good.CertFile, TLSKey: good.KeyFile, TLSCA: good.CAFile}.options()
	if err != nil || len(opts) != 3 {
		t.Fatalf("good credentials: %d options, %v", len(opts), err)
	}
}

func TestEmbeddedNATSRequiresNodeCredentials(t *testing.T) {
	conf := writeConf(t, "authorization {\n  users = [ {user: a, password: s3cretpw} ]\n}\n")
	_, err := Start(Config{NATSConfigFile: conf, NATSListen: "127.0.0.1:0", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "requires clients to authenticate") {
		t.Fatalf("Start without credentials: %v", err)
	}
	for _, c := range []struct {
		conf string
		auth bool
	}{
		{"listen: 127.0.0.1:4222\n", false},
		{"authorization { token: abc }\n", true},
		{"authorization { user: a, password: b }\n", true},
		{"authorization {\n  users = [ {user: a, password: b} ]\n}\nno_auth_user: a\n", false},
		{"accounts { A { users = [ {user: a, password: b} ] } }\n", true},
	} {
		opts, err := server.ProcessConfigFile(writeConf(t, c.conf))
		if err != nil {
			t.Fatal(err)
		}
		if got := requiresAuth(opts); got != c.auth {
			t.Errorf("requiresAuth(%q) = %v", c.conf, got)
		}
	}
	if (NATSAuth{TLSCA: "ca.pem"}).given() || !(NATSAuth{Token: "t"}).given() {
		t.Error("given")
	}
	err = natsConnectError("nats://x", true, fmt.Errorf("read: %w", io.ErrClosedPipe))
	if !errors.Is(err, io.ErrClosedPipe) || !strings.Contains(err.Error(), "check the node's credentials") {
		t.Errorf("closed pipe: %v", err)
	}
}

// The embedded NATS server's repeated warnings and errors (a route
// re-dialled every few seconds) come out once per window; different
// formats are not held back by each other.
func TestNATSLoggerHoldsBackRepeats(t *testing.T) {
	var out strings.Builder
	now := time.Unix(1_800_000_000, 0)
	l := &natsLogger{log: slog.New(slog.NewTextHandler(&out, nil)), repeats: loglimit.NewRepeats(10 * time.Second)}
	l.repeats.Now = func() time.Time { return now }
	for i := 0; i < 6; i++ {
		l.Errorf("Error trying to connect to route (attempt %v): %v", i, "i/o timeout")
		l.Warnf("Stale connection %d", i)
		now = now.Add(2 * time.Second)
	}
	l.Errorf("Error trying to connect to route (attempt %v): %v", 6, "i/o timeout")
	got := out.String()
	if n := strings.Count(got, "Error trying to connect to route"); n != 2 {
		t.Fatalf("%d route errors in 12 s, want 2 (one per 10 s window):\n%s", n, got)
	}
	// Attempts 1 to 4 held back; 5, at 10 s, passes and says so; 6 is held.
	if !strings.Contains(got, `(attempt 5): i/o timeout" repeated=4`) || strings.Contains(got, "attempt 6") {
		t.Fatalf("the line after the window does not say what was held back:\n%s", got)
	}
	if n := strings.Count(got, "Stale connection"); n != 2 {
		t.Fatalf("%d stale-connection warnings in 12 s, want 2:\n%s", n, got)
	}
}
