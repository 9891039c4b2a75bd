package check

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// deploy/nats/accounts.conf as a user runs it: Concord's embedded
// nats-server loads the file as it is, with the passwords its header asks
// for in the environment; a user of each tenant account writes and
// watches through the imports, and the two tenants' same key is two keys.
func TestNATSAccountsExample(t *testing.T) {
	conf := filepath.Join(repoRoot, "deploy", "nats", "accounts.conf")
	pw := map[string]string{"CONCORD_REPLICA_PASSWORD": "r-secret", "CONCORD_EVENTS_PASSWORD": "e-secret",
		"CONCORD_OPERATOR_PASSWORD": "o-secret", "TENANT_A_PASSWORD": "a-secret", "TENANT_B_PASSWORD": "b-secret"}
	var env []string
	for k, v := range pw {
		env = append(env, k+"="+v)
	}
	env = append(env, "CONCORD_NATS_PASSWORD=r-secret", "CONCORD_NATS_EVENTS_PASSWORD=e-secret")
	natsPort := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	p := start(t, "concord", []string{concordBin, "serve", "--data-dir", t.TempDir(), "--bootstrap",
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", natsPort),
		"--nats-config", conf, "--nats-user", "concord-replica", "--nats-events-user", "concord-events"}, env...)

	dial := func(user, password string) *nats.Conn {
		t.Helper()
		var nc *nats.Conn
		checkFor(t, 30*time.Second, 100*time.Millisecond, func() error {
			p.running(t)
			var err error
			nc, err = nats.Connect(url, nats.UserInfo(user, password))
			return err
		})
		t.Cleanup(nc.Close)
		return nc
	}
	request := func(nc *nats.Conn, subject, body string) string {
		t.Helper()
		var reply string
		checkFor(t, 30*time.Second, 100*time.Millisecond, func() error {
			p.running(t)
			m, err := nc.Request(subject, []byte(body), 2*time.Second)
			if err != nil {
				return err
			}
			if m.Header.Get("Nats-Service-Error-Code") != "" {
				return fmt.Errorf("%s: %s", subject, m.Data)
			}
			reply = string(m.Data)
			return nil
		})
		return reply
	}
	a, b := dial("tenant-a", pw["TENANT_A_PASSWORD"]), dial("tenant-b", pw["TENANT_B_PASSWORD"])
	events := make(chan *nats.Msg, 4)
	if _, err := a.ChanSubscribe("concord.watch.>", events); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	request(a, "concord.kv.put", `{"key":"app.config","value":"A's"}`)
	request(b, "concord.kv.put", `{"key":"app.config","value":"B's"}`)
	if got := request(a, "concord.kv.get", `{"key":"app.config"}`); !strings.Contains(got, `"A's"`) {
		t.Fatalf("tenant A reads %s", got)
	}
	if got := request(b, "concord.kv.get", `{"key":"app.config"}`); !strings.Contains(got, `"B's"`) {
		t.Fatalf("tenant B reads %s", got)
	}
	select {
	case m := <-events:
		var ev struct {
			Key   string          `json:"key"`
			Value json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(m.Data, &ev); err != nil || m.Subject != "concord.watch.app.config" || string(ev.Value) != `"A's"` {
			t.Fatalf("tenant A's watcher got %s on %s", m.Data, m.Subject)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tenant A's watcher got no event through its import")
	}
	select {
	case m := <-events:
		t.Fatalf("tenant A's watcher got a second event, %s: B's put?", m.Data)
	case <-time.After(300 * time.Millisecond):
	}
	// The operator sees both tenants.
	op := dial("concord-operator", pw["CONCORD_OPERATOR_PASSWORD"])
	got := request(op, "concord.cluster.tenants", `{}`)
	if !strings.Contains(got, `"tenant":"TENANT_A"`) || !strings.Contains(got, `"tenant":"TENANT_B"`) {
		t.Fatalf("cluster.tenants: %s", got)
	}
}
