package replica

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
)

// Test hook: the Raft link fault switch. Black-box tests partition nodes
// by writing, for each node, a file that names the peers it may not talk
// to (Config.TestFaultFile, the serve flag --test-fault-file). It is not a
// feature: nothing but a test sets it, and without it the stream layer
// neither tracks nor blocks anything.

// testFaults blocks the Raft links of a streamLayer to chosen peers:
// while a peer's address is blocked, dials to it fail, and every change
// of the blocked set cuts every connection, which partitions this node
// from that peer at the transport. Blocking must be set on both sides of a
// link (each side only controls its own dials).
type testFaults struct {
	mu      sync.Mutex
	blocked []string
	conns   map[net.Conn]string // live connections, by peer address ("" if accepted)
}

// errBlocked is returned by Dial to a peer the fault switch blocks.
var errBlocked = errors.New("raft link blocked by the fault switch")

// newTestFaults returns a fault switch that blocks nothing yet.
func newTestFaults() *testFaults {
	return &testFaults{conns: map[net.Conn]string{}}
}

// blocks reports whether dials to addr are refused.
func (f *testFaults) blocks(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.blocked, addr)
}

// track records c until it closes, so that setBlocked can cut it. A dial
// checks blocks before it connects, and the switch may change while it
// connects: a connection to peer that is blocked by the time it is
// recorded is closed and refused here, under the lock setBlocked takes,
// so that no link outlives the cut. (One that survived kept a partitioned
// leader in touch with a follower, which then refused the majority's
// votes.) Accepted connections (peer "") are cut on the dialling side.
func (f *testFaults) track(c net.Conn, peer string) (net.Conn, error) {
	tc := &trackedConn{Conn: c, faults: f}
	f.mu.Lock()
	if peer != "" && slices.Contains(f.blocked, peer) {
		f.mu.Unlock()
		c.Close()
		return nil, fmt.Errorf("dial %s: %w", peer, errBlocked)
	}
	f.conns[tc] = peer
	f.mu.Unlock()
	return tc, nil
}

// setBlocked replaces the blocked set and cuts every connection, so that
// no stream survives across a change of the fault switch.
func (f *testFaults) setBlocked(peers []string) {
	f.mu.Lock()
	f.blocked = peers
	conns := make([]net.Conn, 0, len(f.conns))
	for c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// trackedConn is a connection the fault switch can cut.
type trackedConn struct {
	net.Conn
	faults *testFaults
	once   sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.faults.mu.Lock()
		delete(c.faults.conns, c)
		c.faults.mu.Unlock()
	})
	return c.Conn.Close()
}

// faultFile is the JSON the fault switch reads: the Raft addresses of the
// peers this node may not talk to.
type faultFile struct {
	Block []string `json:"block"`
}

// EnableTestFaults switches the fault switch on, driven by the file at
// path until done is closed. Call it before the layer accepts or dials
// anything: the switch tracks every connection from then on.
func (s *StreamLayer) EnableTestFaults(path string, log *slog.Logger, done <-chan struct{}) {
	s.testFaults = newTestFaults()
	go watchFaults(path, s.testFaults, log, done)
}

// watchFaults polls path and applies it to the fault switch until done is
// closed. A missing file blocks nothing.
func watchFaults(path string, f *testFaults, log *slog.Logger, done <-chan struct{}) {
	var last []string
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var ff faultFile
		if data, err := os.ReadFile(path); err == nil {
			if err := json.Unmarshal(data, &ff); err != nil {
				log.Warn("fault file unreadable", "path", path, "err", err)
			}
		}
		slices.Sort(ff.Block)
		if !slices.Equal(ff.Block, last) {
			log.Warn("fault switch: raft links blocked", "peers", ff.Block)
			f.setBlocked(ff.Block)
			last = ff.Block
		}
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}
