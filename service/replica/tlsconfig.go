package replica

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"
)

// TLSFiles names the PEM files that put Raft's traffic on mutual TLS. Set
// all three to turn it on, or none to keep Raft on plain TCP; anything in
// between is a configuration error.
//
// Every node of a cluster presents CertFile (with KeyFile) both as a server,
// to the peers that dial it, and as a client, when it dials them; it trusts
// exactly the CA in CAFile, for both directions. So the certificate must
// allow server and client authentication (extended key usages serverAuth
// and clientAuth, or none at all), and it must name the host of the node's
// Raft address as the other nodes dial it: an IP SAN for an address such
// as 10.0.0.5:7422, a DNS SAN for a name such as n1.concord.internal:7422.
// Any certificate the CA signed is a member's: the CA is the trust
// boundary, so give Raft a CA of its own.
type TLSFiles struct {
	// CertFile holds this node's certificate, optionally followed by
	// intermediates.
	CertFile string
	// KeyFile holds the private key of CertFile.
	KeyFile string
	// CAFile holds the CA certificate(s) that sign every member's
	// certificate.
	CAFile string
}

// ErrTLS reports Raft TLS files that are incomplete, unreadable or do
// not fit together.
var ErrTLS = errors.New("raft TLS")

// raftTLSMinVersion is the oldest TLS version Raft accepts. Only Concord
// nodes speak on the Raft port, so there is no older peer to wait for.
const raftTLSMinVersion = tls.VersionTLS13

// raftTLSHandshakeTimeout bounds a handshake on an accepted connection, so
// that a peer that connects and sends nothing holds nothing for long.
const raftTLSHandshakeTimeout = 10 * time.Second

// Enabled reports whether any of the files is set; check insists on all.
func (t TLSFiles) Enabled() bool {
	return t.CertFile != "" || t.KeyFile != "" || t.CAFile != ""
}

// Check loads the files as load does and reports the first problem, so a
// node with a bad certificate refuses to start before it opens anything.
func (t TLSFiles) Check() error {
	if !t.Enabled() {
		return nil
	}
	_, _, err := t.load()
	return err
}

// load reads the files and returns the configuration of the accepting
// side (it requires and verifies a client certificate signed by the CA)
// and of the dialing side (it presents the same certificate and verifies
// the server's against the CA; the caller sets ServerName per dial). It
// also verifies the node's own certificate against the CA for both uses,
// so a mismatched file set fails here with a clear error instead of in
// every handshake.
func (t TLSFiles) load() (server, client *tls.Config, err error) {
	switch {
	case t.CertFile == "":
		return nil, nil, fmt.Errorf("%w: a certificate is required (--raft-tls-cert) with --raft-tls-key and --raft-tls-ca", ErrTLS)
	case t.KeyFile == "":
		return nil, nil, fmt.Errorf("%w: a private key is required (--raft-tls-key) with --raft-tls-cert and --raft-tls-ca", ErrTLS)
	case t.CAFile == "":
		return nil, nil, fmt.Errorf("%w: a CA is required (--raft-tls-ca) with --raft-tls-cert and --raft-tls-key", ErrTLS)
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: certificate %s with key %s: %w", ErrTLS, t.CertFile, t.KeyFile, err)
	}
	pemCA, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: read CA: %w", ErrTLS, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemCA) {
		return nil, nil, fmt.Errorf("%w: CA %s holds no PEM certificate", ErrTLS, t.CAFile)
	}
	leaf := cert.Leaf
	if leaf == nil { // LoadX509KeyPair fills Leaf since Go 1.23; be safe
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("%w: parse certificate %s: %w", ErrTLS, t.CertFile, err)
		}
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: parse intermediate in %s: %w", ErrTLS, t.CertFile, err)
		}
		inter.AddCert(c)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		opts := x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}
		if _, err := leaf.Verify(opts); err != nil {
			return nil, nil, fmt.Errorf("%w: certificate %s does not verify against CA %s for %s: %w",
				ErrTLS, t.CertFile, t.CAFile, usageName(usage), err)
		}
	}
	server = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   raftTLSMinVersion,
	}
	client = &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   raftTLSMinVersion,
	}
	return server, client, nil
}

// usageName names an extended key usage in errors.
func usageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageClientAuth {
		return "client authentication"
	}
	return "server authentication"
}
