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

// A broken key rule is a *KeyError whose Rule completes a sentence about
// the key in plain words, and which matches ErrInvalidKey.
func TestKeyErrorRules(t *testing.T) {
	cases := []struct{ key, rule string }{
		{"", "must not be empty"},
		{strings.Repeat("k", MaxKeyBytes+1), "is 1025 bytes long, more than the 1024 allowed"},
		{"a b", "must not contain spaces"},
		{"a\tb", "must not contain tabs"},
		{"a\r\nb", "must not contain line breaks"},
		{"nul\x00", "must not contain control characters"},
		{"del\x7f", "must not contain control characters"},
		{"caf\u00e9", "must be ASCII text: letters, digits and punctuation such as . - _ / : ('é' is not ASCII)"},
		{"bad\xff", "must be ASCII text: letters, digits and punctuation such as . - _ / : (it holds bytes that are not UTF-8 text)"},
		{"a.*", "must not contain '*': it is a NATS wildcard"},
		{"a.>", "must not contain '>': it is a NATS wildcard"},
		{".a", "must not start with '.' (keys are '.'-separated words, and no word may be empty)"},
		{"a.", "must not end with '.' (keys are '.'-separated words, and no word may be empty)"},
		{"a..b", "must not contain '..' (keys are '.'-separated words, and no word may be empty)"},
	}
	for _, tc := range cases {
		err := ValidateKey(tc.key, MaxKeyBytes)
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Rule != tc.rule || !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%q: %v, want the rule %q", tc.key, err, tc.rule)
		}
	}
	if err := ValidateKey("a b", MaxKeyBytes); err.Error() != "invalid key: it must not contain spaces" {
		t.Errorf("Error() = %q", err)
	}
	// A prefix may end with '.', and says "prefix" nowhere itself: the
	// caller names the field.
	if err := ValidatePrefix("svc.", MaxKeyBytes); err != nil {
		t.Errorf("svc.: %v", err)
	}
	var ke *KeyError
	if err := ValidatePrefix("svc..a", MaxKeyBytes); !errors.As(err, &ke) || ke.Rule != "must not contain '..' (keys are '.'-separated words, and no word may be empty)" {
		t.Errorf("svc..a: %v", err)
	}
}

func TestValidateNodeIDDescriptions(t *testing.T) {
	for id, want := range map[string]string{
		"":                      `node id "" must be 1 to 64 characters long`,
		strings.Repeat("n", 65): `node id "` + strings.Repeat("n", 65) + `" must be 1 to 64 characters long`,
		"n.1":                   `node id "n.1" must hold only letters, digits, '-' and '_'`,
	} {
		if err := ValidateNodeID(id); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %q", id, err, want)
		}
	}
}

// Every endpoint is a write or a read, and the writes are exactly the
// endpoints that change the log or the membership.
func TestEndpointWrites(t *testing.T) {
	writes := map[Endpoint]bool{LeaseGrant: true, LeaseKeepAlive: true, LeaseKeepAliveMany: true, LeaseRevoke: true,
		KVPut: true, KVDelete: true, KVTxn: true, KVCompact: true, ClusterRemove: true, ClusterQuota: true, ClusterTenantMove: true}
	for _, e := range Endpoints {
		if e.Writes() != writes[e] {
			t.Errorf("%s: Writes() = %v", e, e.Writes())
		}
	}
}

// The endpoints that add state are writes, and exactly the three that can
// make a new lease, key or value.
func TestEndpointAddsState(t *testing.T) {
	adds := map[Endpoint]bool{LeaseGrant: true, KVPut: true, KVTxn: true}
	for _, e := range Endpoints {
		if e.AddsState() != adds[e] {
			t.Errorf("%s: AddsState() = %v", e, e.AddsState())
		}
		if e.AddsState() && !e.Writes() {
			t.Errorf("%s adds state but is not a write", e)
		}
	}
}

// Tenants may call the lease and kv endpoints only, and the tenants' watch
// subjects put the account at the token the export names.
func TestTenantSubjects(t *testing.T) {
	for _, e := range Endpoints {
		want := strings.HasPrefix(string(e), "lease.") || strings.HasPrefix(string(e), "kv.")
		if e.ForTenants() != want {
			t.Errorf("%s: ForTenants() = %v", e, e.ForTenants())
		}
	}
	for _, prefix := range []string{"concord", "acme.locks"} {
		n, err := New(prefix)
		if err != nil {
			t.Fatal(err)
		}
		subj := n.TenantWatch("TENANT_A", "svc.a")
		tokens := strings.Split(subj, ".")
		if got := tokens[n.TenantAccountToken()-1]; got != "TENANT_A" {
			t.Errorf("%s: token %d of %s is %q", prefix, n.TenantAccountToken(), subj, got)
		}
		if !subjectMatches(n.TenantWatchExport(), subj) || subjectMatches(n.WatchAll(), subj) {
			t.Errorf("%s: %s is outside the export %s, or inside %s", prefix, subj, n.TenantWatchExport(), n.WatchAll())
		}
	}
}

// subjectMatches reports whether subject matches the NATS pattern.
func subjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}
