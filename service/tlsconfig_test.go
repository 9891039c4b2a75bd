package service

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// testCA is a throw-away certificate authority for tests; its keys live
// only in memory and in the test's temporary directory.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // PEM of cert
}

// newTestCA makes a CA and writes its certificate to dir.
func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue signs a certificate for 127.0.0.1 with the given extended key
// usages and writes it and its key to dir; it returns the RaftTLS naming
// them and this CA.
func (ca *testCA) issue(t *testing.T, dir, name string, usages ...x509.ExtKeyUsage) RaftTLS {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if usages == nil {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	r := RaftTLS{CertFile: filepath.Join(dir, name+".pem"), KeyFile: filepath.Join(dir, name+"-key.pem"), CAFile: ca.file}
	writePEM(t, r.CertFile, "CERTIFICATE", der)
	writePEM(t, r.KeyFile, "PRIVATE KEY", keyDER)
	return r
}

// writePEM writes one PEM block to path, readable by the owner only.
func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestRaftTLSLoadErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "one")
	other := newTestCA(t, dir, "other")
	good := ca.issue(t, dir, "n1")
	foreign := other.issue(t, dir, "n9")
	serverOnly := ca.issue(t, dir, "srv", x509.ExtKeyUsageServerAuth)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		tls  RaftTLS
		want string
	}{
		{"no cert", RaftTLS{KeyFile: good.KeyFile, CAFile: good.CAFile}, "a certificate is required"},
		{"no key", RaftTLS{CertFile: good.CertFile, CAFile: good.CAFile}, "a private key is required"},
		{"no CA", RaftTLS{CertFile: good.CertFile, KeyFile: good.KeyFile}, "a CA is required"},
		{"missing cert file", RaftTLS{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: good.KeyFile, CAFile: good.CAFile}, "no such file"},
		{"missing key file", RaftTLS{CertFile: good.CertFile, KeyFile: filepath.Join(dir, "nope.pem"), CAFile: good.CAFile}, "no such file"},
		{"key of another cert", RaftTLS{CertFile: good.CertFile, KeyFile: foreign.KeyFile, CAFile: good.CAFile}, "private key does not match"},
		{"missing CA file", RaftTLS{CertFile: good.CertFile, KeyFile: good.KeyFile, CAFile: filepath.Join(dir, "nope.pem")}, "read CA"},
		{"CA not PEM", RaftTLS{CertFile: good.CertFile, KeyFile: good.KeyFile, CAFile: notPEM}, "holds no PEM certificate"},
		{"cert of another CA", RaftTLS{CertFile: foreign.CertFile, KeyFile: foreign.KeyFile, CAFile: good.CAFile}, "does not verify against CA"},
		{"server auth only", serverOnly, "for client authentication"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.tls.check()
			if !errors.Is(err, ErrRaftTLS) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("check: %v, want ErrRaftTLS containing %q", err, c.want)
			}
			cfg := Config{RaftTLS: c.tls}
			cfg.fillDefaults()
			if err := cfg.validate(); !errors.Is(err, ErrConfig) || !errors.Is(err, ErrRaftTLS) {
				t.Fatalf("validate: %v, want ErrConfig and ErrRaftTLS", err)
			}
		})
	}
	if err := good.check(); err != nil {
		t.Fatalf("good files: %v", err)
	}
	if err := (RaftTLS{}).check(); err != nil {
		t.Fatalf("no TLS: %v", err)
	}
}

// newTestTLSLayer listens on a free loopback port with the files of r.
func newTestTLSLayer(t *testing.T, r RaftTLS) *tlsStreamLayer {
	t.Helper()
	inner, err := newStreamLayer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	inner.testFaults = newTestFaults()
	l, err := newTLSStreamLayer(inner, r, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		inner.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// acceptOne returns the next connection l accepts within timeout, or nil.
func acceptOne(l *tlsStreamLayer, timeout time.Duration) net.Conn {
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
	ca := newTestCA(t, dir, "one")
	other := newTestCA(t, dir, "other")
	a := newTestTLSLayer(t, ca.issue(t, dir, "a"))
	b := newTestTLSLayer(t, ca.issue(t, dir, "b"))
	stranger := newTestTLSLayer(t, other.issue(t, dir, "x"))

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
