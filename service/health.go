package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/console"
)

// serveHTTP starts the operator listener: /metrics for Prometheus,
// /healthz (the process is up) and /readyz (the node can serve). It is
// separate from NATS so that a load balancer or kubelet can probe a node
// without credentials for the bus.
func (s *Service) serveHTTP(addr string) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.Registry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	var err error
	s.http, err = s.listenHTTP("metrics", addr, mux, nil)
	return err
}

// listenHTTP serves h on addr in the background, once check (when
// given) accepts the address listened on; what names the listener in
// errors and logs. Idle connections are closed after a while: they hold
// file descriptors the node needs for Raft and NATS.
func (s *Service) listenHTTP(what, addr string, h http.Handler, check func(net.Addr) error) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener %s: %w", what, addr, err)
	}
	if check != nil {
		if err := check(ln.Addr()); err != nil {
			ln.Close()
			return nil, fmt.Errorf("%s listener %s: %w", what, addr, err)
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn(what+" listener stopped", "err", err)
		}
	}()
	s.log.Info(what+" listening", "addr", ln.Addr().String())
	return srv, nil
}

// serveConsole serves the read-only operator console on addr, reading
// the cluster through the node's own connection.
func (s *Service) serveConsole(addr string) error {
	c, err := client.Connect(client.Conn(s.nc), client.Prefix(s.cfg.SubjectPrefix))
	if err != nil {
		return fmt.Errorf("console: %w", err)
	}
	// The configuration accepts "localhost" by its name; without a
	// password, what it resolved to must be loopback too.
	loopback := func(a net.Addr) error {
		if s.cfg.ConsolePassword == "" && !console.LoopbackHost(a.String()) {
			return fmt.Errorf("%w: the console has no password, and %s is not a loopback address", ErrConfig, a)
		}
		return nil
	}
	s.console, err = s.listenHTTP("console", addr, console.Handler(console.Options{Client: c, NodeID: s.cfg.NodeID,
		User: s.cfg.ConsoleUser, Password: s.cfg.ConsolePassword, Log: s.log}), loopback)
	return err
}

// closeHTTP stops the operator listener and the console. The console's
// event streams last as long as their pages, so it is closed, not shut
// down gracefully.
func (s *Service) closeHTTP() {
	if s.console != nil {
		s.console.Close()
	}
	if s.http == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.http.Shutdown(ctx)
}

// ErrNotReady is wrapped by Ready's error: the node cannot serve yet
// (it is starting, restoring its snapshot, replaying its log), knows no
// leader, or has not applied everything known to be committed.
var ErrNotReady = errors.New("not ready")

// Ready reports whether the node can serve: it knows a leader (it serves,
// if it is the leader), and its state machine has applied every entry it
// knows to be committed (so a node catching up after a restart or a
// snapshot install is not ready). Its error says what the node is doing
// in the words its 503 replies and its node report use (activity).
func (s *Service) Ready() error {
	if c := s.fence.Load(); c != nil {
		return fmt.Errorf("%w: %s", ErrNotReady, c)
	}
	if act := s.activity(); act != "" {
		return fmt.Errorf("%w: %s", ErrNotReady, act)
	}
	// activity is "" only once Raft runs and knows a leader.
	_, id := s.raft.LeaderWithID()
	// A follower's own commit index stops at the end of its log, so a node
	// still receiving entries or a snapshot would look caught up: compare
	// with the leader's.
	commit := s.raft.CommitIndex()
	if s.raft.State() != raft.Leader {
		info, err := s.prober.AskNode(string(id), schema.NodeInfoRequest{}, readyWait)
		if err != nil {
			return fmt.Errorf("%w: cannot ask the leader %s for its commit index: %v", ErrNotReady, id, err)
		}
		commit = max(commit, info.CommitIndex)
	}
	// Under load the applied index trails the commit index by an entry or
	// two at any instant; waiting briefly for it keeps a busy node ready,
	// while a node that is catching up stays behind and is not.
	if e := s.applied.Wait(commit, readyWait); e != nil {
		applied := s.sm.Applied.Get()
		what := s.describeReplay(applied, commit)
		if what == "" {
			what = "catching up" // applied got there just now
		}
		return fmt.Errorf("%w: %s (applied index %d is behind the leader's commit index %d)", ErrNotReady, what, applied, commit)
	}
	return nil
}

// readyWait is how long /readyz waits for the state machine to apply what
// was committed when the probe arrived.
const readyWait = time.Second
