package subjects

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateKey(t *testing.T) {
	good := []string{"a", "svc.api.n1", "a-b_c.D9", "~!@#$%^&()", strings.Repeat("k", MaxKeyBytes)}
	for _, k := range good {
		if err := ValidateKey(k, MaxKeyBytes); err != nil {
			t.Errorf("%q: %v", k, err)
		}
	}
	bad := []string{"", "a b", "a.*", "a.>", "*", ">", ".a", "a.", "a..b", "caf\u00e9", "tab\t", "nul\x00", strings.Repeat("k", MaxKeyBytes+1)}
	for _, k := range bad {
		if err := ValidateKey(k, MaxKeyBytes); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%q accepted or wrong error: %v", k, err)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"", "svc", "svc.", "svc.ap"} {
		if err := ValidatePrefix(p, MaxKeyBytes); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{".svc", "svc..", "a b", "svc.>", "svc.*", strings.Repeat("p", MaxKeyBytes+1)} {
		if err := ValidatePrefix(p, MaxKeyBytes); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%q accepted or wrong error: %v", p, err)
		}
	}
}

func TestNames(t *testing.T) {
	n, err := New("acme.concord")
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Request(LeaseGrant); got != "acme.concord.lease.grant" {
		t.Errorf("Request = %q", got)
	}
	if got := n.Watch("svc.api"); got != "acme.concord.watch.svc.api" {
		t.Errorf("Watch = %q", got)
	}
	if got := n.WatchAll(); got != "acme.concord.watch.>" {
		t.Errorf("WatchAll = %q", got)
	}
	for _, p := range []string{"", "a.>", "a b", "a."} {
		if _, err := New(p); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}
