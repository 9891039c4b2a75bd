package decode

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

func TestTenant(t *testing.T) {
	msg := func(vals ...string) *nats.Msg {
		m := &nats.Msg{Header: nats.Header{}}
		for _, v := range vals {
			m.Header.Add(HeaderRequestInfo, v)
		}
		return m
	}
	for _, c := range []struct {
		name string
		m    *nats.Msg
		want string
	}{
		{"no header", &nats.Msg{}, fsm.DefaultTenant},
		{"other headers", &nats.Msg{Header: nats.Header{"X": {"y"}}}, fsm.DefaultTenant},
		{"stamped", msg(`{"acc":"TENANT_A","rtt":1234}`), "TENANT_A"},
		{"stamped with share", msg(`{"acc":"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGHIJKLMNOPQRSTUV","user":"u","name":"n","host":"127.0.0.1"}`),
			"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGHIJKLMNOPQRSTUV"},
		// Another case of the key is another header, which the server
		// neither writes nor Concord reads.
		{"lower case", &nats.Msg{Header: nats.Header{"nats-request-info": {`{"acc":"B"}`}}}, fsm.DefaultTenant},
		// Past the fast path, encoding/json reads it the same.
		{"escaped", msg(`{"acc":"A\u0042"}`), "AB"},
		{"acc not first", msg(`{"rtt":1,"acc":"C"}`), "C"},
		{"acc twice", msg(`{"acc":"A","acc":"B"}`), "B"},
		{"spaced", msg(`{ "acc" : "D" }`), "D"},
		{"no rtt", msg(`{"acc":"E"}`), "E"},
		{"negative rtt", msg(`{"acc":"F","rtt":-1}`), "F"},
	} {
		got, e := Tenant(c.m)
		if e != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, e, c.want)
		}
	}
	for _, c := range []struct {
		name, want string
		m          *nats.Msg
	}{
		{"twice", "2 times", msg(`{"acc":"A"}`, `{"acc":"B"}`)},
		{"not JSON", "not the JSON object", msg(`acc=A`)},
		{"JSON after the fast path's part", "not the JSON object", msg(`{"acc":"A",garbage}`)},
		{"no acc", "names no account", msg(`{"rtt":1}`)},
		{"empty acc", "names no account", msg(`{"acc":""}`)},
		{"dotted acc", "not a NATS account name", msg(`{"acc":"A.B"}`)},
		{"wildcard acc", "not a NATS account name", msg(`{"acc":">"}`)},
	} {
		got, e := Tenant(c.m)
		if e == nil || e.Name != schema.ErrInvalidRequest || !strings.Contains(e.Description, c.want) {
			t.Errorf("%s: %q, %v; want invalid_request saying %q", c.name, got, e, c.want)
		}
	}
}

func BenchmarkTenant(b *testing.B) {
	m := &nats.Msg{Header: nats.Header{HeaderRequestInfo: {`{"acc":"TENANT_A","rtt":1234567}`}}}
	for b.Loop() {
		if tn, e := Tenant(m); e != nil || tn != "TENANT_A" {
			b.Fatal(tn, e)
		}
	}
}
