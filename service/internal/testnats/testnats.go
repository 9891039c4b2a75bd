// Package testnats gives the service packages' tests a NATS to talk to: an
// in-process nats-server on a loopback port, stopped when the test ends,
// and a request helper that tells a wire error from a transport one.
package testnats

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
)

// Start starts a nats-server with o for the test, stopped when the test
// ends, and waits until it takes connections.
func Start(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return ns
}

// Connect starts a nats-server for the test and returns a connection to
// it; both end with the test.
func Connect(t testing.TB) *nats.Conn {
	t.Helper()
	ns := Start(t, &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Request sends body as JSON to subject and decodes the reply into out
// (unless nil). It returns the wire error of an error reply, and an error
// named "transport", which no reply carries, when no reply came.
func Request(t testing.TB, nc *nats.Conn, subject string, body any, out any) *schema.Error {
	t.Helper()
	data, _ := json.Marshal(body)
	msg, err := nc.Request(subject, data, 10*time.Second)
	if err != nil {
		// Not a wire error: a name no reply can carry, so no test mistakes it for one.
		return &schema.Error{Name: "transport", Description: err.Error()}
	}
	if msg.Header.Get(schema.HeaderErrorCode) != "" {
		var er schema.ErrorReply
		if err := json.Unmarshal(msg.Data, &er); err != nil {
			t.Errorf("bad error body %s", msg.Data)
			return nil
		}
		return er.Error
	}
	if out != nil {
		if err := json.Unmarshal(msg.Data, out); err != nil {
			t.Errorf("decode %s: %v", msg.Data, err)
		}
	}
	return nil
}
