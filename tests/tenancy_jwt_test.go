package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/concord-io/concord/subjects"
	"github.com/concord-io/concord/tests/freeport"
)

// jwtAccount is an account of the operator-mode bus the test builds.
type jwtAccount struct {
	kp     nkeys.KeyPair
	pub    string
	claims *jwt.AccountClaims
}

func newJWTAccount(t *testing.T, name string) *jwtAccount {
	t.Helper()
	kp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	c := jwt.NewAccountClaims(pub)
	c.Name = name
	return &jwtAccount{kp: kp, pub: pub, claims: c}
}

// user returns a user of the account: its JWT and seed.
func (a *jwtAccount) user(t *testing.T, name string) (string, []byte) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	token, err := uc.Encode(a.kp)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	return token, seed
}

// Operator (JWT) mode, as nsc sets it up (docs/tenancy.md): every account
// is a public key, so each tenant's name in Concord is its account's key.
// Concord's account exports its requests and the tenants' events; each
// tenant account imports them, its own events by its key. Two tenants
// write the same key and read their own; each watcher gets its own
// events; an account whose import names another tenant's events gets none
// of them.
func TestTenantsInOperatorMode(t *testing.T) {
	okp, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	opPub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "test-operator"
	sys, concord := newJWTAccount(t, "SYS"), newJWTAccount(t, "CONCORD")
	a, b, thief := newJWTAccount(t, "TENANT_A"), newJWTAccount(t, "TENANT_B"), newJWTAccount(t, "THIEF")
	oc.SystemAccount = sys.pub
	concord.claims.Exports.Add(
		&jwt.Export{Type: jwt.Service, Subject: "concord.lease.*"},
		&jwt.Export{Type: jwt.Service, Subject: "concord.kv.*"},
		&jwt.Export{Type: jwt.Stream, Subject: "concord.tenant.*.watch.>", AccountTokenPosition: 3},
	)
	for _, tn := range []*jwtAccount{a, b, thief} {
		events := tn.pub
		if tn == thief {
			events = a.pub // another tenant's events
		}
		tn.claims.Imports.Add(
			&jwt.Import{Type: jwt.Service, Account: concord.pub, Subject: "concord.lease.*"},
			&jwt.Import{Type: jwt.Service, Account: concord.pub, Subject: "concord.kv.*"},
			&jwt.Import{Type: jwt.Stream, Account: concord.pub, Subject: jwt.Subject("concord.tenant." + events + ".watch.>"), LocalSubject: "concord.watch.>"},
		)
	}
	resolver := &server.MemAccResolver{}
	for _, acc := range []*jwtAccount{sys, concord, a, b, thief} {
		token, err := acc.claims.Encode(okp)
		if err != nil {
			t.Fatal(err)
		}
		if err := resolver.Store(acc.pub, token); err != nil {
			t.Fatal(err)
		}
	}
	port := freeport.Port(t)
	startNATSServer(t, &server.Options{Host: "127.0.0.1", Port: port, TrustedOperators: []*jwt.OperatorClaims{oc},
		AccountResolver: resolver, SystemAccount: sys.pub})
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)

	dir := t.TempDir()
	token, seed := concord.user(t, "concord-node")
	creds := filepath.Join(dir, "concord.creds")
	cfg, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(creds, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	opToken, opSeed := concord.user(t, "operator")
	startSecuredNode(t, dir, "n1", url, []string{"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--bootstrap",
		"--nats-url", url, "--nats-creds", creds}, func() error {
		return answersLeaseList(url, "concord", nats.UserJWTAndSeed(opToken, string(opSeed)))
	})
	dial := func(acc *jwtAccount) *client {
		t.Helper()
		tok, sd := acc.user(t, "app")
		nc, err := nats.Connect(url, nats.UserJWTAndSeed(tok, string(sd)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		names, _ := subjects.New(subjects.DefaultPrefix)
		return &client{t: t, nc: nc, names: names}
	}
	ca, cb, ct := dial(a), dial(b), dial(thief)
	wa, wb := ca.watch("concord.watch.>"), cb.watch("concord.watch.>")
	stolen := watchRaw(t, ct.nc, "concord.watch.>")
	ca.put("app.config", "A's", 0)
	cb.put("app.config", "B's", 0)
	if got := ca.get(map[string]any{"key": "app.config"}); string(got.KVs[0].Value) != `"A's"` {
		t.Fatalf("A reads %s", got.KVs[0].Value)
	}
	if got := cb.get(map[string]any{"key": "app.config"}); string(got.KVs[0].Value) != `"B's"` {
		t.Fatalf("B reads %s", got.KVs[0].Value)
	}
	for name, w := range map[string]*watcher{"A": wa, "B": wb} {
		evs := w.waitFor(1, 10*time.Second)
		if len(evs) != 1 || string(evs[0].Value) != `"`+name+`'s"` {
			t.Fatalf("%s's watcher saw %+v", name, evs)
		}
	}
	// The operator sees each tenant under its account's key.
	opNC, err := nats.Connect(url, nats.UserJWTAndSeed(opToken, string(opSeed)))
	if err != nil {
		t.Fatal(err)
	}
	defer opNC.Close()
	m, err := opNC.Request("concord.cluster.tenants", []byte(`{}`), 10*time.Second)
	if err != nil || !strings.Contains(string(m.Data), a.pub) || !strings.Contains(string(m.Data), b.pub) {
		t.Fatalf("cluster.tenants: %v %s", err, respData(m))
	}
	// The thief's import of A's events delivers nothing.
	ca.put("app.secret", "A's secret", 0)
	wa.waitFor(2, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	stolen.mu.Lock()
	defer stolen.mu.Unlock()
	if len(stolen.subjects) != 0 {
		t.Fatalf("an account importing A's events got %v", stolen.subjects)
	}
}
