package main

// Where and as whom the client commands connect: the connection flags,
// their environment variables (the nats CLI's), nats contexts, and which
// of them wins.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/jsm.go/natscontext"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// connSetting is one connection setting: its flag names (the first is the
// documented one, the others are the nats CLI's spellings, accepted but
// not listed by -h) and its environment variable.
type connSetting struct {
	key   string
	names []string
	env   string
	usage string
}

// connSettings are the settings in the order -h lists them.
var connSettings = []connSetting{
	{"server", []string{"server", "s"}, "NATS_URL", "NATS `URLS`, comma-separated (default nats://127.0.0.1:4222)"},
	{"user", []string{"user"}, "NATS_USER", "NATS user `NAME`; without --password it is a token, as in the nats CLI"},
	{"password", []string{"password"}, "NATS_PASSWORD", "NATS `PASSWORD` (with --user)"},
	{"token", []string{"token"}, "NATS_TOKEN", "NATS authentication `TOKEN`"},
	{"creds", []string{"creds"}, "NATS_CREDS", "NATS credentials `FILE` (a user JWT and its nkey seed)"},
	{"nkey", []string{"nkey"}, "NATS_NKEY", "`FILE` holding the user's nkey seed"},
	{"tls-cert", []string{"tls-cert", "tlscert"}, "NATS_CERT", "TLS client certificate `FILE` (with --tls-key)"},
	{"tls-key", []string{"tls-key", "tlskey"}, "NATS_KEY", "TLS client key `FILE` (with --tls-cert)"},
	{"tls-ca", []string{"tls-ca", "tlsca"}, "NATS_CA", "`FILE` with the CA certificates that signed the server's"},
}

// authKeys are the settings that together say who the user is.
var authKeys = []string{"user", "password", "token", "creds", "nkey"}

// connFlags holds the values of the connection flags, by setting key.
type connFlags map[string]*string

// addConnFlags registers the connection flags on fs.
func addConnFlags(fs *flag.FlagSet) connFlags {
	vals := connFlags{}
	for _, s := range connSettings {
		v := new(string)
		vals[s.key] = v
		for i, name := range s.names {
			usage := s.usage + " ($" + s.env + ")"
			if i > 0 {
				usage = "same as --" + s.names[0]
			}
			fs.StringVar(v, name, "", usage)
		}
	}
	return vals
}

// connAlias reports whether name is another spelling of a connection flag.
func connAlias(name string) bool {
	for _, s := range connSettings {
		for _, n := range s.names[1:] {
			if n == name {
				return true
			}
		}
	}
	return false
}

// connSource is one place connection settings come from: the command
// line, the environment, or a nats context.
type connSource struct {
	vals  map[string]string // command line or environment
	spell func(key string) string
	nctx  *natscontext.Context
	what  string // for messages
}

// has reports whether s gives any of the settings keys. A context
// always gives a server: its own, or nats://127.0.0.1:4222.
func (s *connSource) has(keys ...string) bool {
	if s.nctx != nil {
		for _, k := range keys {
			var v string
			switch k {
			case "server":
				v = s.nctx.ServerURL()
			case "user":
				v = s.nctx.User()
			case "password":
				v = s.nctx.Password()
			case "token":
				v = s.nctx.Token()
			case "creds":
				v = s.nctx.Creds() + s.nctx.UserJWT() // a JWT given inline is credentials too
			case "nkey":
				v = s.nctx.NKey()
			case "tls-cert":
				v = s.nctx.Certificate()
			case "tls-key":
				v = s.nctx.Key()
			case "tls-ca":
				v = s.nctx.CA()
			}
			if v != "" {
				return true
			}
		}
		return false
	}
	for _, k := range keys {
		if s.vals[k] != "" {
			return true
		}
	}
	return false
}

// natsTarget is what connect dials: URLs, the NATS options, and words
// for messages.
type natsTarget struct {
	url  string
	opts []nats.Option
	// where names the server and the context; who the credentials and
	// where they came from. Neither ever holds a secret.
	where, who string
}

// natsTarget works out the target from the flags, the environment and the
// nats contexts. Each setting comes from the first of: its flag; the
// context named by --context; its environment variable; the context named
// by $NATS_CONTEXT; the default. The credentials are taken as one set from
// the first of these that gives any, and so are a client certificate and
// its key: a context's password never pairs with a --user.
func (c *common) natsTarget() (*natsTarget, error) {
	flags := &connSource{vals: map[string]string{}, what: "flags",
		spell: func(k string) string { return "--" + k }}
	for _, s := range connSettings {
		for _, name := range s.names {
			if isSet(c.fs, name) && *c.conn[s.key] != "" {
				flags.vals[s.key] = *c.conn[s.key]
			}
		}
	}
	env := &connSource{vals: map[string]string{}, what: "environment",
		spell: func(k string) string {
			for _, s := range connSettings {
				if s.key == k {
					return "$" + s.env
				}
			}
			return k
		}}
	for _, s := range connSettings {
		env.vals[s.key] = os.Getenv(s.env)
	}
	sources := []*connSource{flags}
	ctxSource := func(name string) (*connSource, error) {
		nctx, err := natscontext.New(name, true)
		if err != nil {
			return nil, fmt.Errorf("nats context %q: %w", name, err)
		}
		return &connSource{nctx: nctx, what: "nats context " + strconv.Quote(nctx.Name)}, nil
	}
	var ctx *connSource
	if isSet(c.fs, "context") {
		s, err := ctxSource(c.natsCtx)
		if err != nil {
			return nil, err
		}
		ctx = s
		sources = append(sources, s, env)
	} else if name := os.Getenv("NATS_CONTEXT"); name != "" {
		s, err := ctxSource(name)
		if err != nil {
			return nil, err
		}
		ctx = s
		sources = append(sources, env, s)
	} else {
		sources = append(sources, env)
	}
	first := func(keys ...string) *connSource {
		for _, s := range sources {
			if s.has(keys...) {
				return s
			}
		}
		return nil
	}

	t := &natsTarget{url: nats.DefaultURL, who: "without credentials"}
	if ctx != nil {
		opts, err := ctx.nctx.NATSOptions()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ctx.what, err)
		}
		t.opts = append(t.opts, opts...)
	}
	switch s := first("server"); {
	case s == ctx && ctx != nil:
		t.url = ctx.nctx.ServerURL()
	case s != nil:
		t.url = s.vals["server"]
	}
	t.where = t.url
	if ctx != nil {
		t.where += " with " + ctx.what
	}

	if s := first(authKeys...); s == ctx && ctx != nil {
		t.who = "with the credentials of " + ctx.what
	} else if s != nil {
		opt, who, err := authOption(s)
		if err != nil {
			return nil, err
		}
		t.who = who
		if ctx != nil {
			t.opts = append(t.opts, noAuth()) // the context's credentials give way
		}
		t.opts = append(t.opts, opt)
	}
	if s := first("tls-cert", "tls-key"); s != nil && s != ctx {
		cert, key := s.vals["tls-cert"], s.vals["tls-key"]
		if cert == "" || key == "" {
			return nil, usagef("give %s and %s together", s.spell("tls-cert"), s.spell("tls-key"))
		}
		opt := nats.ClientCert(cert, key)
		if err := tryOption(opt); err != nil {
			return nil, usagef("%s %s, %s %s: %v", s.spell("tls-cert"), cert, s.spell("tls-key"), key, err)
		}
		t.opts = append(t.opts, opt)
	}
	if s := first("tls-ca"); s != nil && s != ctx {
		opt := nats.RootCAs(s.vals["tls-ca"])
		if err := tryOption(opt); err != nil {
			return nil, usagef("%s %s: %v", s.spell("tls-ca"), s.vals["tls-ca"], err)
		}
		t.opts = append(t.opts, opt)
	}
	return t, nil
}

// authOption is the NATS option for the credentials that s gives, after
// checking that they are one set and that their files can be read.
func authOption(s *connSource) (nats.Option, string, error) {
	v := s.vals
	var given []string
	for _, k := range authKeys {
		if v[k] != "" && k != "password" {
			given = append(given, s.spell(k))
		}
	}
	switch {
	case v["password"] != "" && v["user"] == "":
		return nil, "", usagef("%s needs %s", s.spell("password"), s.spell("user"))
	case len(given) > 1:
		return nil, "", usagef("give one kind of credentials, not %s", strings.Join(given, " and "))
	}
	var opt nats.Option
	var who string
	switch {
	case v["user"] != "" && v["password"] != "":
		opt, who = nats.UserInfo(v["user"], v["password"]), fmt.Sprintf("as user %q (%s)", v["user"], s.spell("user"))
	case v["user"] != "":
		// The nats CLI's rule: a user without a password is a token.
		opt, who = nats.Token(v["user"]), fmt.Sprintf("with a token (%s)", s.spell("user"))
	case v["token"] != "":
		opt, who = nats.Token(v["token"]), fmt.Sprintf("with a token (%s)", s.spell("token"))
	case v["creds"] != "":
		file := v["creds"]
		opt, who = nats.UserCredentials(file), fmt.Sprintf("with the credentials %s (%s)", file, s.spell("creds"))
		if err := tryOption(opt); err != nil {
			return nil, "", usagef("%s %s: %v", s.spell("creds"), file, err)
		}
		// The option reads the JWT now but the seed only when it signs.
		if err := checkSeed(file); err != nil {
			return nil, "", usagef("%s %s: %v", s.spell("creds"), file, err)
		}
	case v["nkey"] != "":
		file := v["nkey"]
		var err error
		if opt, err = nats.NkeyOptionFromSeed(file); err != nil {
			return nil, "", usagef("%s %s: %v", s.spell("nkey"), file, err)
		}
		who = fmt.Sprintf("with the nkey %s (%s)", file, s.spell("nkey"))
	}
	return opt, who, nil
}

// checkSeed checks that a credentials file holds an nkey seed.
func checkSeed(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	kp, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return fmt.Errorf("no nkey seed: %w", err)
	}
	kp.Wipe()
	return nil
}

// tryOption applies opt to scratch options, which reads and checks the
// files it names.
func tryOption(opt nats.Option) error {
	var o nats.Options
	return opt(&o)
}

// noAuth clears the credentials set by the options before it.
func noAuth() nats.Option {
	return func(o *nats.Options) error {
		o.User, o.Password, o.UserInfo = "", "", nil
		o.Token, o.TokenHandler = "", nil
		o.UserJWT, o.SignatureCB, o.Nkey = nil, nil, ""
		return nil
	}
}

// connectError explains a failed connection: refused credentials (exit
// 9), an unreachable server (exit 5), or a TLS problem.
func connectError(t *natsTarget, err error) error {
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired):
		return fmt.Errorf("NATS at %s refused the connection %s: %w", t.where, t.who, err)
	case isTLSError(err):
		return fmt.Errorf("TLS with NATS at %s failed (the server's CA: --tls-ca; a client certificate: --tls-cert and --tls-key): %w", t.where, err)
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrTimeout), isNetError(err):
		return errConnect{fmt.Errorf("cannot reach NATS (%s): %w", t.where, err)}
	}
	return err
}

func isTLSError(err error) bool {
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	var alert tls.AlertError
	var recHdr tls.RecordHeaderError
	return errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verify) ||
		errors.As(err, &alert) || errors.As(err, &recHdr) || errors.Is(err, nats.ErrTLS) || errors.Is(err, nats.ErrSecureConnRequired) ||
		errors.Is(err, nats.ErrSecureConnWanted) || strings.Contains(err.Error(), "tls: ")
}
