package replica

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/service/internal/testwait"
)

// Without the test hook the stream layer hands out the plain TCP
// connections and blocks nothing.
func TestStreamLayerWithoutFaultHook(t *testing.T) {
	a, b := newPlainLayer(t), newPlainLayer(t)
	c, err := a.Dial(raft.ServerAddress(b.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("dialled %T, want the plain *net.TCPConn", c)
	}
	s, err := b.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*net.TCPConn); !ok {
		t.Fatalf("accepted %T, want the plain *net.TCPConn", s)
	}
}

// The fault file blocks dials to the peers it names and cuts live
// connections; emptying it heals the link.
func TestFaultFileBlocksAndHeals(t *testing.T) {
	a, b := newPlainLayer(t), newPlainLayer(t)
	a.testFaults = newTestFaults()
	path := filepath.Join(t.TempDir(), "faults.json")
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		watchFaults(path, a.testFaults, slog.New(slog.NewTextHandler(io.Discard, nil)), done)
	}()
	t.Cleanup(func() { close(done); <-stopped })
	peer := raft.ServerAddress(b.Addr().String())

	c, err := a.Dial(peer, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"block":["` + string(peer) + `"]}`)
	testwait.Until(t, "the link is blocked", func() bool {
		_, err := a.Dial(peer, time.Second)
		return errors.Is(err, errBlocked)
	})
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ne net.Error
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a connection survived the fault switch: read %v", err)
	}
	write(`{"block":[]}`)
	testwait.Until(t, "the link heals", func() bool {
		c, err := a.Dial(peer, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// newPlainLayer listens on a free loopback port.
func newPlainLayer(t *testing.T) *StreamLayer {
	t.Helper()
	l, err := NewStreamLayer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// A dial passes the blocked check before it connects; if the switch cuts
// the link while it connects, the new connection must not survive the cut.
// (One that did kept a partitioned leader in touch with a follower.)
func TestFaultSwitchRefusesAConnectionThatRacedTheCut(t *testing.T) {
	b := newPlainLayer(t)
	peer := b.Addr().String()
	f := newTestFaults()
	raw, err := net.Dial("tcp", peer) // connected before the switch changed
	if err != nil {
		t.Fatal(err)
	}
	f.setBlocked([]string{peer})
	if c, err := f.track(raw, peer); !errors.Is(err, errBlocked) {
		t.Fatalf("recorded a connection to a blocked peer: %v, %v", c, err)
	}
	if _, err := raw.Write([]byte("x")); err == nil {
		t.Fatal("the refused connection is still open")
	}
	if n := len(f.conns); n != 0 {
		t.Fatalf("%d connections recorded", n)
	}
	// A peer not blocked is recorded, and cut by the next change.
	other, err := net.Dial("tcp", peer)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.track(other, "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	f.setBlocked(nil)
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("a connection survived a change of the switch")
	}
}
