package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// readyTimeout bounds how long a fresh set of servers may take to elect a
// leader and answer on every client address.
const readyTimeout = 60 * time.Second

// servers is one system's fresh set of server processes on loopback.
type servers struct {
	procs []*proc
	urls  []string // client addresses, one per server, in node order
	// leader is the index in urls of the Raft leader once ready (Concord
	// only: the echo responder subscribes there, where Concord's own
	// subscriptions are).
	leader int
	// metrics are the nodes' /metrics URLs, in node order (Concord with
	// config.metrics only).
	metrics []string
}

func (s *servers) stop() error {
	if s == nil {
		return nil
	}
	return stopAll(s.procs)
}

// alive returns an error if any server has exited.
func (s *servers) alive() error {
	var errs []error
	for _, p := range s.procs {
		errs = append(errs, p.exited())
	}
	return errors.Join(errs...)
}

// waitFor polls f every 200 ms until it returns nil, a server exits, ctx
// ends, or readyTimeout passes.
func (s *servers) waitFor(ctx context.Context, what string, f func(context.Context) error) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if err := s.alive(); err != nil {
			return err
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			var tails []string
			for _, p := range s.procs {
				tails = append(tails, p.tail(10))
			}
			return fmt.Errorf("%s not ready after %s: %w\n%s", what, readyTimeout, err, strings.Join(tails, "\n"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startConcord starts n Concord nodes with embedded NATS in dir, the way
// `make bench` does (n1 bootstraps, the others join over NATS routes), and
// returns once every node's NATS address answers a status request with n
// reachable voters and a leader.
func startConcord(ctx context.Context, cfg *config, pp *ports, dir string, n int) (*servers, error) {
	s := &servers{}
	natsAddrs := make([]string, n)
	routeAddrs := make([]string, n)
	raftAddrs := make([]string, n)
	for i := range n {
		var errs [3]error
		natsAddrs[i], errs[0] = pp.addr()
		routeAddrs[i], errs[1] = pp.addr()
		raftAddrs[i], errs[2] = pp.addr()
		if err := errors.Join(errs[:]...); err != nil {
			return nil, err
		}
	}
	var routes []string
	for _, a := range routeAddrs {
		routes = append(routes, "nats://"+a)
	}
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		args := []string{"serve", "--node-id", id, "--data-dir", filepath.Join(dir, id),
			"--raft-addr", raftAddrs[i], "--nats-listen", natsAddrs[i],
			// As `make bench`: the grant workload holds more leases than
			// the default limit allows.
			"--max-leases", "10000000", "--log-level", "warn"}
		if cfg.metrics {
			addr, err := pp.addr()
			if err != nil {
				return s, err
			}
			args = append(args, "--metrics-listen", addr)
			s.metrics = append(s.metrics, "http://"+addr+"/metrics")
		}
		args = append(args, cfg.concordArgs...)
		if n > 1 {
			mode := "--join"
			if i == 0 {
				mode = "--bootstrap"
			}
			args = append(args, "--nats-cluster", routeAddrs[i], "--nats-routes", strings.Join(routes, ","), mode)
		}
		p, err := startProc("concord "+id, filepath.Join(dir, id+".log"), cfg.concord, args...)
		if err != nil {
			return s, err
		}
		s.procs = append(s.procs, p)
		s.urls = append(s.urls, "nats://"+natsAddrs[i])
	}
	names, _ := subjects.New(subjects.DefaultPrefix) // the default prefix is valid
	for i, url := range s.urls {
		err := s.waitFor(ctx, fmt.Sprintf("concord at %s", url), func(ctx context.Context) error {
			st, err := concordStatus(ctx, url, names)
			if err != nil {
				return err
			}
			voters := 0
			for _, m := range st.Members {
				if m.Reachable && m.Suffrage == "voter" {
					voters++
				}
			}
			if st.Leader == "" || voters != n {
				return fmt.Errorf("leader %q, %d reachable voters of %d", st.Leader, voters, n)
			}
			if i == 0 {
				k, err := strconv.Atoi(strings.TrimPrefix(st.Leader, "n"))
				if err != nil || k < 1 || k > n {
					return fmt.Errorf("leader %q is none of n1..n%d", st.Leader, n)
				}
				s.leader = k - 1
			}
			return nil
		})
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

// concordStatus asks the cluster behind url for its status.
func concordStatus(ctx context.Context, url string, names subjects.Names) (*schema.ClusterStatusReply, error) {
	nc, err := nats.Connect(url, nats.Name("concord-bench-ready"))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	msg, err := nc.RequestWithContext(ctx, names.Request(subjects.ClusterStatus), []byte(`{}`))
	if err != nil {
		return nil, err
	}
	if code := msg.Header.Get(schema.HeaderErrorCode); code != "" {
		return nil, fmt.Errorf("status: %s %s", code, msg.Header.Get(schema.HeaderError))
	}
	var st schema.ClusterStatusReply
	if err := json.Unmarshal(msg.Data, &st); err != nil {
		return nil, fmt.Errorf("status reply %.200q: %w", msg.Data, err)
	}
	return &st, nil
}

// startEtcd starts n etcd members in dir as one new cluster and returns
// once every member has a leader and serves a linearizable read.
func startEtcd(ctx context.Context, cfg *config, pp *ports, dir string, n int) (*servers, error) {
	s := &servers{}
	clientAddrs := make([]string, n)
	peerAddrs := make([]string, n)
	var initial []string
	for i := range n {
		var err1, err2 error
		clientAddrs[i], err1 = pp.addr()
		peerAddrs[i], err2 = pp.addr()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		initial = append(initial, fmt.Sprintf("m%d=http://%s", i+1, peerAddrs[i]))
	}
	token := filepath.Base(dir) // a new cluster every time
	for i := range n {
		name := fmt.Sprintf("m%d", i+1)
		// etcd's defaults otherwise (fsync on, snapshot count, heartbeat
		// and election timeouts), as Concord runs with its defaults.
		args := []string{"--name", name, "--data-dir", filepath.Join(dir, name),
			"--listen-client-urls", "http://" + clientAddrs[i], "--advertise-client-urls", "http://" + clientAddrs[i],
			"--listen-peer-urls", "http://" + peerAddrs[i], "--initial-advertise-peer-urls", "http://" + peerAddrs[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", token, "--logger", "zap", "--log-level", "warn"}
		p, err := startProc("etcd "+name, filepath.Join(dir, name+".log"), cfg.etcd, args...)
		if err != nil {
			return s, err
		}
		s.procs = append(s.procs, p)
		s.urls = append(s.urls, clientAddrs[i])
	}
	for _, ep := range s.urls {
		c, err := newEtcdClient(ep)
		if err != nil {
			return s, err
		}
		err = s.waitFor(ctx, "etcd at "+ep, func(ctx context.Context) error {
			st, err := c.Status(ctx, ep)
			if err != nil {
				return err
			}
			if st.Leader == 0 {
				return errors.New("no leader")
			}
			ml, err := c.MemberList(ctx)
			if err != nil {
				return err
			}
			if len(ml.Members) != n {
				return fmt.Errorf("%d members of %d", len(ml.Members), n)
			}
			_, err = c.Get(ctx, "ready")
			return err
		})
		c.Close()
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

// newEtcdClient connects the official etcd client to one endpoint. Its
// logger is off: the benchmark counts and reports failed requests itself.
func newEtcdClient(endpoint string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %s: %w", endpoint, err)
	}
	return c, nil
}

// startEcho starts the echo responder (this program, re-run as
// `echo-responder`) on url and returns once a request on the echo subject
// comes back.
func startEcho(ctx context.Context, dir, url string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("echo responder: %w", err)
	}
	p, err := startProc("echo", filepath.Join(dir, "echo.log"), self, "echo-responder", "--url", url, "--subject", echoSubject)
	if err != nil {
		return nil, err
	}
	s := &servers{procs: []*proc{p}}
	err = s.waitFor(ctx, "echo responder", func(ctx context.Context) error {
		nc, err := nats.Connect(url, nats.Name("concord-bench-ready"))
		if err != nil {
			return err
		}
		defer nc.Close()
		m, err := nc.RequestWithContext(ctx, echoSubject, []byte("ping"))
		if err != nil {
			return err
		}
		if string(m.Data) != "ping" {
			return fmt.Errorf("echo answered %q to %q", m.Data, "ping")
		}
		return nil
	})
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// toolVersion returns the first line a program prints for --version, or
// "unknown".
func toolVersion(path string, args ...string) string {
	out, err := exec.Command(path, args...).Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}
