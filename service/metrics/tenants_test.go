package metrics

import (
	"testing"

	"github.com/concord-io/concord/fsm"
)

// The first tenants met get labels of their own, for good; the rest, and
// names that would read as the shared labels, are "other".
func TestTenantLabels(t *testing.T) {
	l := NewTenantLabels(2)
	for _, c := range []struct{ tenant, want string }{
		{fsm.DefaultTenant, DefaultTenantLabel},
		{"B", "B"},
		{OtherTenant, OtherTenant}, // an account named "other" shares the label
		{"A", "A"},
		{"C", OtherTenant},
		{"B", "B"},
		{"A", "A"},
		{DefaultTenantLabel, OtherTenant},
	} {
		if got := l.Label(c.tenant); got != c.want {
			t.Errorf("Label(%q) = %q, want %q", c.tenant, got, c.want)
		}
	}
	if got := NewTenantLabels(0).Label("A"); got != OtherTenant {
		t.Errorf("with no labels, A is %q", got)
	}
}
