package decode

import (
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
)

// The join and remove requests refuse bad input with a sentence, before
// they touch Raft: their decoding needs nothing of the node.
func TestClusterRequestsRefuseBadInput(t *testing.T) {
	d := testDecoder()
	join := func(b []byte) *schema.Error { _, e := d.Join(b); return e }
	remove := func(b []byte) *schema.Error { _, e := d.Remove(b); return e }
	cases := []struct {
		name   string
		decode func([]byte) *schema.Error
		body   string
		want   string
	}{
		{"join, bad id", join, `{"id":"bad id!","address":"127.0.0.1:7001"}`, `id: the node id "bad id!" must hold only letters, digits, '-' and '_'`},
		{"join, empty id", join, `{"id":"","address":"127.0.0.1:7001"}`, `id: the node id "" must be 1 to 64 characters long`},
		{"join, no address", join, `{"id":"n4"}`, "address is required: the Raft address (host:port)"},
		{"remove, bad id", remove, `{"id":"n 4"}`, `id: the node id "n 4" must hold only`},
	}
	for _, c := range cases {
		e := c.decode([]byte(c.body))
		if e == nil || e.Name != schema.ErrInvalidRequest || !strings.Contains(e.Description, c.want) {
			t.Errorf("%s: %v, want invalid_request saying %q", c.name, e, c.want)
		}
	}
}
