package bus

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/subjects"
)

// AskNode takes only the named node's own report: an error reply, a
// body that does not decode, another node's answer and silence are errors.
func TestAskNodeInfo(t *testing.T) {
	nc := testnats.Connect(t)
	names, _ := subjects.New(subjects.DefaultPrefix)
	p := NewProber(nc, names)
	answer := func(id string, f func(m *nats.Msg)) {
		t.Helper()
		sub, err := nc.Subscribe(names.NodeInfo(id), f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	answer("e1", func(m *nats.Msg) {
		r := nats.NewMsg(m.Reply)
		r.Header.Set(schema.HeaderErrorCode, "400")
		r.Data = []byte(`{"error":{"code":400,"name":"invalid_request","description":"no"}}`)
		_ = m.RespondMsg(r)
	})
	answer("e2", func(m *nats.Msg) { _ = m.Respond([]byte(`{"id":`)) })
	answer("e3", func(m *nats.Msg) { _ = m.Respond([]byte(`{"id":"someone-else"}`)) })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"e1": "invalid_request: no",
		"e2": "unexpected end of JSON input",
		"e3": `node "someone-else" answered`,
		"e4": "no responders",
	} {
		if _, err := p.AskNode(id, schema.NodeInfoRequest{}, time.Second); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ask %s: %v, want an error saying %q", id, err, want)
		}
	}
	answer("n2", func(m *nats.Msg) { _ = m.Respond([]byte(`{"id":"n2","log_format":3}`)) })
	if info, err := p.AskNode("n2", schema.NodeInfoRequest{}, 5*time.Second); err != nil || info.ID != "n2" || info.LogFormat != 3 {
		t.Fatalf("ask n2: %+v, %v", info, err)
	}
}

// parseNodeInfo is how every node-info answer is read, the bus probes'
// included: a report, or an error for an error reply or a bad body.
func TestDecodeNodeInfo(t *testing.T) {
	ok := &nats.Msg{Data: []byte(`{"id":"n2","cluster_id":"c1","state":"follower"}`)}
	if info, err := parseNodeInfo(ok); err != nil || info.ID != "n2" || info.ClusterID != "c1" {
		t.Fatalf("a report: %+v, %v", info, err)
	}
	errReply := nats.NewMsg("x")
	errReply.Header.Set(schema.HeaderErrorCode, "503")
	errReply.Data = []byte(`{"error":{"code":503,"name":"unavailable","description":"busy"}}`)
	for name, c := range map[string]struct {
		m    *nats.Msg
		want string
	}{
		"error reply": {errReply, "unavailable: busy"},
		"bad body":    {&nats.Msg{Data: []byte(`{"id":`)}, "unexpected end of JSON input"},
	} {
		if _, err := parseNodeInfo(c.m); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}
