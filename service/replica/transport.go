package replica

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// StreamLayer is Raft's TCP stream layer. Tests may switch on a fault
// switch (testFaults, testhook_faults.go) that cuts links to chosen peers;
// in production it stays nil and the layer only listens and dials.
type StreamLayer struct {
	ln        net.Listener
	advertise net.Addr

	// testFaults is a test hook, never set outside tests and
	// Config.TestFaultFile: while set, it tracks every connection and
	// refuses dials to the peers it blocks.
	testFaults *testFaults
}

var _ raft.StreamLayer = (*StreamLayer)(nil)

func NewStreamLayer(bind string) (*StreamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raft listener on %s: %w", bind, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if addr.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft address %s: give an address other nodes can reach, not an unspecified one", bind)
	}
	var advertise net.Addr = addr
	if host, port, err := net.SplitHostPort(bind); err == nil && net.ParseIP(host) == nil && port != "0" {
		// A host name is advertised as given, not as the address it
		// resolved to now: Raft records the advertised address in the
		// cluster configuration, and a node that comes back with a new IP
		// under the same name (a rescheduled pod, a recreated container)
		// must still be found there.
		advertise = namedAddr(net.JoinHostPort(host, port))
	}
	return &StreamLayer{ln: ln, advertise: advertise}, nil
}

// namedAddr is a TCP address given by host name.
type namedAddr string

func (a namedAddr) Network() string { return "tcp" }
func (a namedAddr) String() string  { return string(a) }

func (s *StreamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	if f := s.testFaults; f != nil {
		tc, _ := f.track(c, "") // never refused: accepted links are cut by the dialler
		return tc, nil
	}
	return c, nil
}

func (s *StreamLayer) Close() error   { return s.ln.Close() }
func (s *StreamLayer) Addr() net.Addr { return s.advertise }

func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	f := s.testFaults
	if f != nil && f.blocks(string(address)) {
		return nil, fmt.Errorf("dial %s: %w", address, errBlocked)
	}
	c, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	if f != nil {
		return f.track(c, string(address))
	}
	return c, nil
}

// TLSStreamLayer runs Raft's streams over mutual TLS on top of a
// streamLayer, whose fault switch keeps working: it acts on the TCP
// connections underneath. Accepted connections are handshaken in their own
// goroutines, so a peer that stalls or speaks plain TCP neither blocks the
// accept loop nor reaches Raft; it is logged and cut off.
type TLSStreamLayer struct {
	inner  *StreamLayer
	server *tls.Config
	client *tls.Config
	log    *slog.Logger

	acceptCh chan acceptResult
	done     chan struct{}
	close    sync.Once
}

var _ raft.StreamLayer = (*TLSStreamLayer)(nil)

// acceptResult is a connection that passed the handshake, or the error of
// the listener.
type acceptResult struct {
	conn net.Conn
	err  error
}

// errLayerClosed is what Accept returns once the layer is closed.
var errLayerClosed = errors.New("raft stream layer closed")

// NewTLSStreamLayer loads the files of t and starts accepting on inner.
// inner is not closed on an error.
func NewTLSStreamLayer(inner *StreamLayer, t TLSFiles, log *slog.Logger) (*TLSStreamLayer, error) {
	server, client, err := t.load()
	if err != nil {
		return nil, err
	}
	l := &TLSStreamLayer{
		inner: inner, server: server, client: client, log: log,
		acceptCh: make(chan acceptResult),
		done:     make(chan struct{}),
	}
	go l.acceptLoop()
	return l, nil
}

// acceptLoop takes connections from the TCP listener and hands each to a
// handshake of its own until the listener closes.
func (l *TLSStreamLayer) acceptLoop() {
	for {
		c, err := l.inner.Accept()
		if err != nil {
			select {
			case l.acceptCh <- acceptResult{err: err}:
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go l.handshake(c)
	}
}

// handshake runs the server side of the TLS handshake, within
// raftTLSHandshakeTimeout, and delivers the connection to Accept.
func (l *TLSStreamLayer) handshake(c net.Conn) {
	tc := tls.Server(c, l.server)
	_ = c.SetDeadline(time.Now().Add(raftTLSHandshakeTimeout))
	if err := tc.Handshake(); err != nil {
		l.log.Warn("raft TLS handshake refused; connection closed", "peer", c.RemoteAddr().String(), "err", err)
		tc.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	select {
	case l.acceptCh <- acceptResult{conn: tc}:
	case <-l.done:
		tc.Close()
	}
}

// Accept returns the next connection whose peer presented a certificate
// the CA signed.
func (l *TLSStreamLayer) Accept() (net.Conn, error) {
	select {
	case <-l.done: // closed wins over a connection still on its way
		return nil, errLayerClosed
	default:
	}
	select {
	case r := <-l.acceptCh:
		return r.conn, r.err
	case <-l.done:
		return nil, errLayerClosed
	}
}

// Close stops accepting; connections already handed out stay open.
func (l *TLSStreamLayer) Close() error {
	var err error
	l.close.Do(func() {
		close(l.done)
		err = l.inner.Close()
	})
	return err
}

// Addr is the advertised Raft address.
func (l *TLSStreamLayer) Addr() net.Addr { return l.inner.Addr() }

// Dial connects through the fault switch and completes the client side of
// the handshake within timeout, verifying that the peer's certificate is
// signed by the CA and names the host of address.
func (l *TLSStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	start := time.Now()
	c, err := l.inner.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("raft TLS dial %s: %w", address, err)
	}
	cfg := l.client.Clone()
	cfg.ServerName = host
	tc := tls.Client(c, cfg)
	if timeout > 0 {
		_ = c.SetDeadline(start.Add(timeout))
	}
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft TLS handshake with %s: %w", address, err)
	}
	_ = c.SetDeadline(time.Time{})
	return tc, nil
}
