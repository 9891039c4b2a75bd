package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/service/loglimit"
)

// payloadHeadroom is what an envelope (key, revisions, headers) may add to
// the largest value.
const payloadHeadroom = 64 << 10

// startEmbeddedNATS starts an in-process nats-server with the options of
// embeddedNATSOptions. NoSigs keeps it from trapping SIGTERM and exiting
// before Raft and bbolt close; its logs go to ours; its Fatalf becomes a
// start-up error.
func startEmbeddedNATS(cfg *Config, log *slog.Logger) (*server.Server, *server.Options, error) {
	opts, err := embeddedNATSOptions(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	ns, err := runEmbeddedNATS(cfg, opts, log)
	return ns, opts, err
}

func runEmbeddedNATS(cfg *Config, opts *server.Options, log *slog.Logger) (*server.Server, error) {
	if requiresAuth(opts) && !cfg.NATSAuth.given() {
		return nil, fmt.Errorf("%w: --nats-config %s requires clients to authenticate, and this node is one: give its credentials with --nats-user/--nats-password, --nats-nkey, --nats-creds, --nats-token or --nats-tls-cert/--nats-tls-key",
			ErrConfig, cfg.NATSConfigFile)
	}
	listen := net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	logger := &natsLogger{log: log.With("component", "nats"), fatal: make(chan string, 1), repeats: loglimit.NewRepeats(loglimit.Window)}
	ns.SetLoggerV2(logger, opts.Debug, opts.Trace, false)
	go ns.Start()
	ready := make(chan bool, 1)
	go func() { ready <- ns.ReadyForConnections(10 * time.Second) }()
	select {
	case msg := <-logger.fatal:
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats on %s: %s", listen, msg)
	case ok := <-ready:
		if !ok {
			ns.Shutdown()
			select {
			case msg := <-logger.fatal:
				return nil, fmt.Errorf("embedded nats on %s: %s", listen, msg)
			default:
			}
			return nil, fmt.Errorf("embedded nats on %s: not ready after 10s", listen)
		}
	}
	return ns, nil
}

// defaultNATSHost and defaultNATSPort are where the embedded server
// listens when neither --nats-listen nor a --nats-config file says.
const (
	defaultNATSHost = "127.0.0.1"
	defaultNATSPort = 4222
)

// embeddedNATSOptions builds the embedded server's options. Without
// cfg.NATSConfigFile they are Concord's own. With it, the file is read the
// way nats-server reads it (server.ProcessConfigFile: users, nkeys,
// accounts, permissions, TLS, limits, ...) and Concord applies on top only
// what was given explicitly or what it needs:
//
//   - NoSigs, always: the process, not the server, handles signals.
//   - The client address: cfg.NATSListen when set; otherwise the file's
//     listen/host/port when it sets any; otherwise 127.0.0.1:4222.
//   - max_payload: Concord's default when the file sets none; raised to it,
//     with a warning, when the file's is below the largest value plus its
//     envelope. max_pending is raised along if it would fall below.
//   - server_name: "concord-<node id>" unless the file names the server.
//   - The route listener (cfg.NATSClusterListen) and routes
//     (cfg.NATSRoutes) replace the file's when given.
//   - JetStream in the file is refused: Concord is the consensus layer, and
//     the embedded server runs without it.
func embeddedNATSOptions(cfg *Config, log *slog.Logger) (*server.Options, error) {
	opts := &server.Options{}
	if cfg.NATSConfigFile != "" {
		o, err := server.ProcessConfigFile(cfg.NATSConfigFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --nats-config %s: %w", ErrConfig, cfg.NATSConfigFile, err)
		}
		if o.JetStream {
			return nil, fmt.Errorf("%w: --nats-config %s enables JetStream; the embedded server runs without it (Concord is the consensus layer); run JetStream on a nats-server of its own",
				ErrConfig, cfg.NATSConfigFile)
		}
		opts = o
	}
	opts.NoSigs = true
	if opts.ServerName == "" {
		opts.ServerName = "concord-" + cfg.NodeID
	}

	switch {
	case cfg.NATSListen != "":
		host, portStr, err := net.SplitHostPort(cfg.NATSListen)
		if err != nil {
			return nil, fmt.Errorf("nats listen address %q: %w", cfg.NATSListen, err)
		}
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return nil, fmt.Errorf("nats listen port %q: %w", portStr, err)
		}
		opts.Host, opts.Port = host, port
	case opts.Host == "" && opts.Port == 0:
		opts.Host, opts.Port = defaultNATSHost, defaultNATSPort
	}
	if opts.Port == 0 && cfg.NATSListen != "" {
		opts.Port = server.RANDOM_PORT // --nats-listen host:0 picks a free port
	}

	want := max(2<<20, cfg.MaxValueBytes*2+payloadHeadroom)
	need := cfg.MaxValueBytes + payloadHeadroom
	switch {
	case opts.MaxPayload == 0:
		opts.MaxPayload = int32(want)
	case int(opts.MaxPayload) < need:
		log.Warn("max_payload of --nats-config is below the largest value plus its envelope; raised",
			"file", cfg.NATSConfigFile, "max_payload", opts.MaxPayload, "raised_to", want, "max_value_bytes", cfg.MaxValueBytes)
		opts.MaxPayload = int32(want)
	}
	switch {
	case opts.MaxPending == 0:
		opts.MaxPending = int64(max(64<<20, 4*int(opts.MaxPayload)))
	case opts.MaxPending < int64(opts.MaxPayload):
		log.Warn("max_pending of --nats-config is below max_payload; raised to it",
			"file", cfg.NATSConfigFile, "max_pending", opts.MaxPending, "raised_to", opts.MaxPayload)
		opts.MaxPending = int64(opts.MaxPayload)
	}

	if cfg.NATSClusterListen != "" {
		chost, cportStr, err := net.SplitHostPort(cfg.NATSClusterListen)
		if err != nil {
			return nil, fmt.Errorf("nats cluster address %q: %w", cfg.NATSClusterListen, err)
		}
		cport, err := strconv.Atoi(cportStr)
		if err != nil {
			return nil, fmt.Errorf("nats cluster port %q: %w", cportStr, err)
		}
		opts.Cluster.Host, opts.Cluster.Port = chost, cport
		if opts.Cluster.Name == "" {
			opts.Cluster.Name = "concord"
		}
	}
	if len(cfg.NATSRoutes) > 0 {
		opts.Routes = server.RoutesFromStr(strings.Join(cfg.NATSRoutes, ","))
		if len(opts.Routes) != len(cfg.NATSRoutes) {
			return nil, fmt.Errorf("nats routes %q: not all are URLs", cfg.NATSRoutes)
		}
	}
	// A --nats-config that sets its own route pings keeps them.
	if opts.Cluster.PingInterval == 0 {
		opts.Cluster.PingInterval = routePingInterval
	}
	if opts.Cluster.MaxPingsOut == 0 {
		opts.Cluster.MaxPingsOut = routeMaxPingsOut
	}
	return opts, nil
}

// Route pings. A server cut off from its peers cannot withdraw its
// subscriptions across the cut, so until a route is declared dead the
// others go on handing it requests for the subscriptions behind it: the
// old leader's among them, while a new leader serves. With NATS's defaults
// (pings every 30 s at most on routes, two missed) a cut leader took 24 to
// 40 s to stop swallowing requests the healthy majority could serve. A
// route that misses three pings a second apart is dead within about 4 s.
// Pings are a few bytes; a route too busy to answer three in a row for
// 3 s is as good as dead for requests anyway.
const (
	routePingInterval = time.Second
	routeMaxPingsOut  = 3
)

// requiresAuth reports whether the server's options make every client
// authenticate: users, nkeys, a single user or token, or an operator, and
// no no_auth_user to fall back on.
func requiresAuth(opts *server.Options) bool {
	if opts.NoAuthUser != "" {
		return false
	}
	return len(opts.Users) > 0 || len(opts.Nkeys) > 0 || opts.Username != "" || opts.Authorization != "" ||
		len(opts.TrustedOperators) > 0 || len(opts.TrustedKeys) > 0
}

// given reports whether any credential is set (a CA alone is none).
func (a NATSAuth) given() bool {
	return a.CredsFile != "" || a.NkeyFile != "" || a.User != "" || a.Token != "" || a.TLSCert != ""
}

// inProcessURL is the URL of the node's own, in-process connection to the
// embedded server. It is always nats://: in-process the server does not
// require TLS even when its clients must use it, so the connection speaks
// TLS only when NATSAuth asks for it (a client certificate for
// verify_and_map, say), and then verifies the server's certificate for the
// listen host.
func inProcessURL(ns *server.Server) string {
	return strings.Replace(ns.ClientURL(), "tls://", "nats://", 1)
}

// natsErrorHandler logs the connection's asynchronous errors, above all
// permission violations: with a --nats-config or an external NATS that
// restricts this node's user, a refused publish or subscribe is otherwise
// silent.
func natsErrorHandler(log *slog.Logger) nats.ErrHandler {
	return func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if sub != nil {
			log.Warn("nats asynchronous error", "subject", sub.Subject, "err", err)
			return
		}
		log.Warn("nats asynchronous error", "err", err)
	}
}

// natsLogger routes nats-server's logs into slog.
type natsLogger struct {
	log   *slog.Logger
	fatal chan string
	// repeats holds back warnings and errors of the same format (a route
	// to a cut-off server is re-dialled and fails every few seconds).
	repeats *loglimit.Repeats
}

func (l *natsLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Warnf(format string, v ...any)   { l.limited(slog.LevelWarn, format, v) }
func (l *natsLogger) Errorf(format string, v ...any)  { l.limited(slog.LevelError, format, v) }

// limited logs a warning or an error unless one of the same format was
// logged within the repeat window.
func (l *natsLogger) limited(level slog.Level, format string, v []any) {
	held := 0
	if l.repeats != nil {
		var ok bool
		if ok, held = l.repeats.Allow(format); !ok {
			return
		}
	}
	if held > 0 {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, v...), "repeated", held)
		return
	}
	l.log.Log(context.Background(), level, fmt.Sprintf(format, v...))
}
func (l *natsLogger) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Tracef(format string, v ...any) {}

// Fatalf records the failure instead of exiting the process.
func (l *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	select {
	case l.fatal <- msg:
	default:
	}
}

// options turns the credentials into nats.go options. Files are read here,
// so that a missing or bad one stops the node before anything starts.
func (a NATSAuth) options() ([]nats.Option, error) {
	var opts []nats.Option
	if a.CredsFile != "" {
		if _, err := os.ReadFile(a.CredsFile); err != nil {
			return nil, fmt.Errorf("nats creds: %w", err)
		}
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	}
	if a.NkeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(a.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("nats nkey %s: %w", a.NkeyFile, err)
		}
		opts = append(opts, o)
	}
	if a.User != "" {
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.Token != "" {
		opts = append(opts, nats.Token(a.Token))
	}
	if a.TLSCert != "" || a.TLSKey != "" {
		if a.TLSCert == "" || a.TLSKey == "" {
			return nil, fmt.Errorf("%w: a NATS client certificate needs both --nats-tls-cert and --nats-tls-key", ErrConfig)
		}
		o := nats.ClientCert(a.TLSCert, a.TLSKey)
		if err := o(&nats.Options{}); err != nil { // loads the files now
			return nil, fmt.Errorf("nats client certificate %s with key %s: %w", a.TLSCert, a.TLSKey, err)
		}
		opts = append(opts, o)
	}
	if a.TLSCA != "" {
		o := nats.RootCAs(a.TLSCA)
		if err := o(&nats.Options{}); err != nil {
			return nil, fmt.Errorf("nats CA %s: %w", a.TLSCA, err)
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// natsConnectError wraps a failed connect with its URL and, when the server
// refused the credentials, says which options carry them.
func natsConnectError(url string, embedded bool, err error) error {
	if errors.Is(err, nats.ErrAuthorization) {
		where := "the NATS server"
		if embedded {
			where = "the embedded server (its --nats-config)"
		}
		return fmt.Errorf("connect to nats %s: %w: %s requires authentication; give this node's credentials with --nats-user/--nats-password, --nats-nkey, --nats-creds, --nats-token or --nats-tls-cert/--nats-tls-key",
			url, err, where)
	}
	if embedded && errors.Is(err, io.ErrClosedPipe) {
		// In process, the server may hang up on refused credentials before
		// the client reads why; its log line above says.
		return fmt.Errorf("connect to nats %s: %w: the embedded server closed this node's connection; if its --nats-config requires authentication, check the node's credentials (--nats-user/--nats-password, --nats-nkey, --nats-creds, --nats-token, --nats-tls-cert)",
			url, err)
	}
	return fmt.Errorf("connect to nats %s: %w", url, err)
}
