package service

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// payloadHeadroom is what an envelope (key, revisions, headers) may add to
// the largest value.
const payloadHeadroom = 64 << 10

// startEmbeddedNATS starts an in-process nats-server on cfg.NATSListen.
// NoSigs keeps it from trapping SIGTERM and exiting before Raft and bbolt
// close; its logs go to ours; its Fatalf becomes a start-up error.
func startEmbeddedNATS(cfg *Config, log *slog.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(cfg.NATSListen)
	if err != nil {
		return nil, fmt.Errorf("nats listen address %q: %w", cfg.NATSListen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("nats listen port %q: %w", portStr, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	maxPayload := max(2<<20, cfg.MaxValueBytes*2+payloadHeadroom)
	opts := &server.Options{
		ServerName: "concord-" + cfg.NodeID,
		Host:       host,
		Port:       port,
		NoSigs:     true,
		MaxPayload: int32(maxPayload),
		MaxPending: int64(max(64<<20, 4*maxPayload)),
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
		opts.Cluster = server.ClusterOpts{Name: "concord", Host: chost, Port: cport}
	}
	if len(cfg.NATSRoutes) > 0 {
		opts.Routes = server.RoutesFromStr(strings.Join(cfg.NATSRoutes, ","))
		if len(opts.Routes) != len(cfg.NATSRoutes) {
			return nil, fmt.Errorf("nats routes %q: not all are URLs", cfg.NATSRoutes)
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	logger := &natsLogger{log: log.With("component", "nats"), fatal: make(chan string, 1)}
	ns.SetLoggerV2(logger, false, false, false)
	go ns.Start()
	ready := make(chan bool, 1)
	go func() { ready <- ns.ReadyForConnections(10 * time.Second) }()
	select {
	case msg := <-logger.fatal:
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats on %s: %s", cfg.NATSListen, msg)
	case ok := <-ready:
		if !ok {
			ns.Shutdown()
			select {
			case msg := <-logger.fatal:
				return nil, fmt.Errorf("embedded nats on %s: %s", cfg.NATSListen, msg)
			default:
			}
			return nil, fmt.Errorf("embedded nats on %s: not ready after 10s", cfg.NATSListen)
		}
	}
	return ns, nil
}

// natsLogger routes nats-server's logs into slog.
type natsLogger struct {
	log   *slog.Logger
	fatal chan string
}

func (l *natsLogger) Noticef(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *natsLogger) Tracef(format string, v ...any)  {}

// Fatalf records the failure instead of exiting the process.
func (l *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(msg)
	select {
	case l.fatal <- msg:
	default:
	}
}

// options turns the credentials into nats.go options.
func (a NATSAuth) options() ([]nats.Option, error) {
	var opts []nats.Option
	if a.CredsFile != "" {
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
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	return opts, nil
}
