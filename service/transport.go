package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is Raft's TCP stream layer with a fault switch for tests:
// while a peer's address is blocked, dials to it fail and every
// connection is cut, which partitions this node from that peer at the
// transport. Blocking must be set on both sides of a link (each side only
// controls its own dials); see FaultFile in Config.
type streamLayer struct {
	ln        net.Listener
	advertise net.Addr

	mu      sync.Mutex
	blocked []string
	conns   map[net.Conn]string // live connections, by peer address ("" if accepted)
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// errBlocked is returned by Dial to a peer the fault switch blocks.
var errBlocked = errors.New("raft link blocked by the fault switch")

func newStreamLayer(bind string) (*streamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raft listener on %s: %w", bind, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if addr.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft address %s: give an address other nodes can reach, not an unspecified one", bind)
	}
	return &streamLayer{ln: ln, advertise: addr, conns: map[net.Conn]string{}}, nil
}

func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	return s.track(c, ""), nil
}

func (s *streamLayer) Close() error   { return s.ln.Close() }
func (s *streamLayer) Addr() net.Addr { return s.advertise }

func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	s.mu.Lock()
	blocked := slices.Contains(s.blocked, string(address))
	s.mu.Unlock()
	if blocked {
		return nil, fmt.Errorf("dial %s: %w", address, errBlocked)
	}
	c, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	return s.track(c, string(address)), nil
}

func (s *streamLayer) track(c net.Conn, peer string) net.Conn {
	tc := &trackedConn{Conn: c, layer: s}
	s.mu.Lock()
	s.conns[tc] = peer
	s.mu.Unlock()
	return tc
}

// setBlocked replaces the blocked set and cuts every connection, so that
// no stream survives across a change of the fault switch.
func (s *streamLayer) setBlocked(peers []string) {
	s.mu.Lock()
	s.blocked = peers
	conns := make([]net.Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	layer *streamLayer
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.layer.mu.Lock()
		delete(c.layer.conns, c)
		c.layer.mu.Unlock()
	})
	return c.Conn.Close()
}

// faultFile is the JSON the fault switch reads: the Raft addresses of the
// peers this node may not talk to.
type faultFile struct {
	Block []string `json:"block"`
}

// watchFaults polls path and applies it to the stream layer until done is
// closed. A missing file blocks nothing.
func watchFaults(path string, s *streamLayer, log *slog.Logger, done <-chan struct{}) {
	var last []string
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var f faultFile
		if data, err := os.ReadFile(path); err == nil {
			if err := json.Unmarshal(data, &f); err != nil {
				log.Warn("fault file unreadable", "path", path, "err", err)
			}
		}
		slices.Sort(f.Block)
		if !slices.Equal(f.Block, last) {
			log.Warn("fault switch: raft links blocked", "peers", f.Block)
			s.setBlocked(f.Block)
			last = f.Block
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}
