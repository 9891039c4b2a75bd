package service

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
)

// The join and remove requests refuse bad input with a sentence, before
// they touch Raft.
func TestClusterRequestsRefuseBadInput(t *testing.T) {
	s := &Service{}
	cases := []struct {
		name string
		h    handlerFunc
		body string
		want string
	}{
		{"join, bad id", s.handleJoin, `{"id":"bad id!","address":"127.0.0.1:7001"}`, `id: the node id "bad id!" must hold only letters, digits, '-' and '_'`},
		{"join, empty id", s.handleJoin, `{"id":"","address":"127.0.0.1:7001"}`, `id: the node id "" must be 1 to 64 characters long`},
		{"join, no address", s.handleJoin, `{"id":"n4"}`, "address is required: the Raft address (host:port)"},
		{"remove, bad id", s.handleRemove, `{"id":"n 4"}`, `id: the node id "n 4" must hold only`},
	}
	for _, c := range cases {
		_, e := c.h(nil, &nats.Msg{Data: []byte(c.body)})
		if e == nil || e.Name != schema.ErrInvalidRequest || !strings.Contains(e.Description, c.want) {
			t.Errorf("%s: %v, want invalid_request saying %q", c.name, e, c.want)
		}
	}
}
