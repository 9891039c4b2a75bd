package replica

import (
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/internal/testca"
)

func TestRaftTLSLoadErrors(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t, dir, "one")
	other := testca.New(t, dir, "other")
	good := TLSFiles(ca.Issue(t, dir, "n1"))
	foreign := TLSFiles(other.Issue(t, dir, "n9"))
	serverOnly := TLSFiles(ca.Issue(t, dir, "srv", x509.ExtKeyUsageServerAuth))
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		tls  TLSFiles
		want string
	}{
		{"no cert", TLSFiles{KeyFile: good.KeyFile, CAFile: good.CAFile}, "a certificate is required"},
		{"no key", TLSFiles{CertFile: good.CertFile, CAFile: good.CAFile}, "a private key is required"},
		{"no CA", TLSFiles{CertFile: good.CertFile, KeyFile: good.KeyFile}, "a CA is required"},
		{"missing cert file", TLSFiles{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: good.KeyFile, CAFile: good.CAFile}, "no such file"},
		{"missing key file", TLSFiles{CertFile: good.CertFile, KeyFile: filepath.Join(dir, "nope.pem"), CAFile: good.CAFile}, "no such file"},
		{"key of another cert", TLSFiles{CertFile: good.CertFile, KeyFile: foreign.KeyFile, CAFile: good.CAFile}, "private key does not match"},
		{"missing CA file", TLSFiles{CertFile: good.CertFile, KeyFile: good.KeyFile, CAFile: filepath.Join(dir, "nope.pem")}, "read CA"},
		{"CA not PEM", TLSFiles{CertFile: good.CertFile, KeyFile: good.KeyFile, CAFile: notPEM}, "holds no PEM certificate"},
		{"cert of another CA", TLSFiles{CertFile: foreign.CertFile, KeyFile: foreign.KeyFile, CAFile: good.CAFile}, "does not verify against CA"},
		{"server auth only", serverOnly, "for client authentication"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.tls.Check()
			if !errors.Is(err, ErrTLS) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("check: %v, want ErrTLS containing %q", err, c.want)
			}
		})
	}
	if err := good.Check(); err != nil {
		t.Fatalf("good files: %v", err)
	}
	if err := (TLSFiles{}).Check(); err != nil {
		t.Fatalf("no TLS: %v", err)
	}
}

// newTestTLSLayer listens on a free loopback port with the files of r.
func newTestTLSLayer(t *testing.T, r TLSFiles) *TLSStreamLayer {
	t.Helper()
	inner, err := NewStreamLayer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inner.testFaults = newTestFaults()
	l, err := NewTLSStreamLayer(inner, r, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		inner.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// acceptOne returns the next connection l accepts within timeout, or nil.
func acceptOne(l *TLSStreamLayer, timeout time.Duration) net.Conn {
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			c = nil
		}
		ch <- c
	}()
	select {
	case c := <-ch:
		return c
	case <-time.After(timeout):
		return nil
	}
}

func TestTLSStreamLayer(t *testing.T) {
	dir := t.TempDir()
	ca := testca.New(t, dir, "one")
	other := testca.New(t, dir, "other")
	a := newTestTLSLayer(t, TLSFiles(ca.Issue(t, dir, "a")))
	b := newTestTLSLayer(t, TLSFiles(ca.Issue(t, dir, "b")))
	stranger := newTestTLSLayer(t, TLSFiles(other.Issue(t, dir, "x")))

	// Members talk.
	c, err := a.Dial(raft.ServerAddress(b.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("dial a member: %v", err)
	}
	defer c.Close()
	s := acceptOne(b, 5*time.Second)
	if s == nil {
		t.Fatal("the member's connection was not accepted")
	}
	defer s.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q, %v", buf, err)
	}

	// A stranger's server certificate is refused by the dialer.
	if _, err := a.Dial(raft.ServerAddress(stranger.Addr().String()), 5*time.Second); err == nil || !strings.Contains(err.Error(), "raft TLS handshake") {
		t.Fatalf("dial a stranger: %v, want a handshake error", err)
	}
	// A stranger's client certificate is refused by the acceptor: in TLS
	// 1.3 the dialer learns it on its first read.
	if sc, err := stranger.Dial(raft.ServerAddress(a.Addr().String()), 5*time.Second); err == nil {
		sc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := sc.Read(make([]byte, 1)); err == nil {
			t.Fatal("a stranger's connection was served")
		}
		sc.Close()
	}
	// Plain TCP never reaches the acceptor's Accept.
	pc, err := net.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	pc.Write([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	if got := acceptOne(a, 500*time.Millisecond); got != nil {
		t.Fatal("a plain TCP connection was accepted")
	}
	pc.SetReadDeadline(time.Now().Add(5 * time.Second))
	// EOF or a reset, but not a timeout: the acceptor hung up.
	var ne net.Error
	if _, err := io.ReadAll(pc); errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("plain TCP connection not closed by the acceptor: %v", err)
	}
	pc.Close()

	// The fault switch of the TCP layer underneath still cuts links.
	b.inner.testFaults.setBlocked([]string{a.Addr().String()})
	if _, err := b.Dial(raft.ServerAddress(a.Addr().String()), time.Second); !errors.Is(err, errBlocked) {
		t.Fatalf("dial through a blocked link: %v", err)
	}
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(buf); err == nil {
		t.Fatal("a TLS connection survived the fault switch")
	}
	b.inner.testFaults.setBlocked(nil)
	c2, err := b.Dial(raft.ServerAddress(a.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("dial after healing: %v", err)
	}
	c2.Close()

	// Close ends Accept.
	a.Close()
	if _, err := a.Accept(); err == nil {
		t.Fatal("Accept after Close succeeded")
	}
}
