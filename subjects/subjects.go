// Package subjects is the one place that knows Concord's NATS subject names
// and the rules that make every key a literal NATS subject suffix, so that a
// watcher can subscribe to P.watch.<key> or P.watch.<prefix>.> directly.
package subjects

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// DefaultPrefix is the subject prefix used when none is configured.
const DefaultPrefix = "concord"

// MaxKeyBytes is the default upper bound on a key's length.
const MaxKeyBytes = 1024

// ErrInvalidKey reports a key, key prefix or subject prefix that breaks the
// key rules. The wrapped message names the rule.
var ErrInvalidKey = errors.New("invalid key")

// Endpoint is a request subject relative to the prefix, such as "lease.grant".
type Endpoint string

// The request endpoints served by the leader.
const (
	LeaseGrant     Endpoint = "lease.grant"
	LeaseKeepAlive Endpoint = "lease.keepalive"
	LeaseRevoke    Endpoint = "lease.revoke"
	LeaseInfo      Endpoint = "lease.info"
	LeaseList      Endpoint = "lease.list"
	KVPut          Endpoint = "kv.put"
	KVGet          Endpoint = "kv.get"
	KVDelete       Endpoint = "kv.delete"
	KVTxn          Endpoint = "kv.txn"
	KVChanges      Endpoint = "kv.changes"
	// KVHistory reads one key's changes; KVCompact drops history.
	KVHistory Endpoint = "kv.history"
	KVCompact Endpoint = "kv.compact"

	LeaseKeepAliveMany Endpoint = "lease.keepalive_many"

	ClusterJoin     Endpoint = "cluster.join"
	ClusterRemove   Endpoint = "cluster.remove"
	ClusterStatus   Endpoint = "cluster.status"
	ClusterSnapshot Endpoint = "cluster.snapshot"

	// ClusterBackup makes the leader take a backup, and ClusterBackupChunk
	// reads it, one chunk per request (schema.ClusterBackupReply).
	ClusterBackup      Endpoint = "cluster.backup"
	ClusterBackupChunk Endpoint = "cluster.backup.chunk"

	// ClusterTenants lists what every tenant holds; ClusterQuota sets a
	// tenant's quota (docs/tenancy.md).
	ClusterTenants Endpoint = "cluster.tenants"
	ClusterQuota   Endpoint = "cluster.quota"
	// ClusterTenantMove steps a tenant's move between clusters, whose
	// fenced space ClusterTenantExport reads a page at a time.
	ClusterTenantMove   Endpoint = "cluster.tenant.move"
	ClusterTenantExport Endpoint = "cluster.tenant.export"
)

// Endpoints lists every request endpoint in a stable order.
var Endpoints = []Endpoint{LeaseGrant, LeaseKeepAlive, LeaseKeepAliveMany, LeaseRevoke, LeaseInfo, LeaseList,
	KVPut, KVGet, KVDelete, KVTxn, KVChanges, KVHistory, KVCompact,
	ClusterJoin, ClusterRemove, ClusterStatus, ClusterSnapshot, ClusterBackup, ClusterBackupChunk, ClusterTenants, ClusterQuota,
	ClusterTenantMove, ClusterTenantExport}

// Name is the endpoint's one name outside its subject: "lease.grant"
// becomes "lease_grant", as NATS micro requires ('.' is not allowed in an
// endpoint name), and the request metrics use the same for their endpoint
// label, so that `nats micro info` and Prometheus agree.
func (e Endpoint) Name() string { return strings.ReplaceAll(string(e), ".", "_") }

// ForTenants reports whether a tenant (a request from another NATS account,
// through a service import) may call the endpoint: the lease and kv
// endpoints, which act on the tenant's own space. The cluster endpoints act
// on the whole cluster and are Concord's own account's.
func (e Endpoint) ForTenants() bool {
	return strings.HasPrefix(string(e), "lease.") || strings.HasPrefix(string(e), "kv.")
}

// Writes reports whether a request to the endpoint changes the cluster's
// state (the log or the membership): its outcome is unknown when no reply
// comes, and the standby answers it outcome_unknown rather than "nothing
// changed". Joins are left out: a joiner asks again by itself, and the
// standby never answers one.
func (e Endpoint) Writes() bool {
	switch e {
	case LeaseGrant, LeaseKeepAlive, LeaseKeepAliveMany, LeaseRevoke, KVPut, KVDelete, KVTxn, KVCompact, ClusterRemove, ClusterQuota, ClusterTenantMove:
		return true
	}
	return false
}

// AddsState reports whether a request to the endpoint can make the
// state bigger: a new lease, key or value. A leader whose disk is full
// refuses these and takes the rest.
func (e Endpoint) AddsState() bool {
	switch e {
	case LeaseGrant, KVPut, KVTxn:
		return true
	}
	return false
}

// Nodes returns the subject every node answers with its own information,
// leader or not; a request gets the first answer. Starting nodes use it to
// see which cluster the bus serves.
func (n Names) Nodes() string { return n.prefix + ".cluster.nodes" }

// NodeInfo returns the subject on which node id answers for itself; every
// node serves it, leader or not.
func (n Names) NodeInfo(id string) string { return n.prefix + ".cluster.node." + id + ".info" }

// ValidateNodeID checks that a node id is one subject token of letters,
// digits, '-' and '_', so it can name the node's own subject.
func ValidateNodeID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("node id %q must be 1 to 64 characters long", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("node id %q must hold only letters, digits, '-' and '_'", id)
		}
	}
	return nil
}

// Names builds subjects under one prefix.
type Names struct {
	prefix string
}

// New validates prefix (a key-shaped string such as "concord" or "acme.concord")
// and returns the subject names under it.
func New(prefix string) (Names, error) {
	if err := ValidateKey(prefix, MaxKeyBytes); err != nil {
		return Names{}, fmt.Errorf("subject prefix %q: %w", prefix, err)
	}
	return Names{prefix: prefix}, nil
}

// Prefix returns the subject prefix.
func (n Names) Prefix() string { return n.prefix }

// Request returns the full subject of an endpoint.
func (n Names) Request(e Endpoint) string { return n.prefix + "." + string(e) }

// Watch returns the subject on which changes to key are published.
func (n Names) Watch(key string) string { return n.prefix + ".watch." + key }

// TenantWatch returns the subject of a tenant's watch events for key,
// P.tenant.<tenant>.watch.<key>: the tenant's account is a token of its
// own (TenantAccountToken), so Concord's account exports
// P.tenant.*.watch.> once, with account_token_position, and each tenant
// imports only its own events, mapped to P.watch.<key>.
func (n Names) TenantWatch(tenant, key string) string {
	return n.prefix + ".tenant." + tenant + ".watch." + key
}

// TenantWatchExport is the subject Concord's account exports the tenants'
// watch events on.
func (n Names) TenantWatchExport() string { return n.prefix + ".tenant.*.watch.>" }

// TenantAccountToken is the 1-based position of the account token in
// TenantWatch subjects: the export's account_token_position.
func (n Names) TenantAccountToken() int { return strings.Count(n.prefix, ".") + 3 }

// WatchAll returns the wildcard subject that matches every watch event.
func (n Names) WatchAll() string { return n.prefix + ".watch.>" }

// KeyError says which rule a key, a key prefix or a subject prefix breaks.
// It matches ErrInvalidKey with errors.Is.
type KeyError struct {
	// Rule ends a sentence that starts with what was checked, such as
	// "must not contain spaces": a server puts the field name in front of
	// it for its error reply ("key must not contain spaces").
	Rule string
}

// Error implements error.
func (e *KeyError) Error() string { return ErrInvalidKey.Error() + ": it " + e.Rule }

// Unwrap lets errors.Is match ErrInvalidKey.
func (e *KeyError) Unwrap() error { return ErrInvalidKey }

func keyError(format string, args ...any) error {
	return &KeyError{Rule: fmt.Sprintf(format, args...)}
}

// ValidateKey checks the key rules: 1..maxBytes bytes of printable ASCII
// without space, '*' or '>', in '.'-separated tokens with no empty token.
// Those rules are exactly what makes "P.watch." + key a literal NATS subject.
// A broken rule is reported as a *KeyError.
func ValidateKey(key string, maxBytes int) error {
	if key == "" {
		return keyError("must not be empty")
	}
	if len(key) > maxBytes {
		return keyError("is %d bytes long, more than the %d allowed", len(key), maxBytes)
	}
	if err := checkChars(key); err != nil {
		return err
	}
	return checkTokens(key, true)
}

// ValidatePrefix checks a key prefix used by ranged reads and deletes. The
// empty prefix matches every key; otherwise the prefix must be the start of
// some valid key (it may end with '.' or inside a token). A broken rule is
// reported as a *KeyError.
func ValidatePrefix(prefix string, maxBytes int) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > maxBytes {
		return keyError("is %d bytes long, more than the %d allowed", len(prefix), maxBytes)
	}
	if err := checkChars(prefix); err != nil {
		return err
	}
	return checkTokens(prefix, false)
}

// checkTokens refuses an empty '.'-separated token; a prefix may end with
// '.' (its last token is still to come).
func checkTokens(s string, whole bool) error {
	const why = " (keys are '.'-separated words, and no word may be empty)"
	switch {
	case s[0] == '.':
		return keyError("must not start with '.'" + why)
	case whole && s[len(s)-1] == '.':
		return keyError("must not end with '.'" + why)
	case strings.Contains(s, ".."):
		return keyError("must not contain '..'" + why)
	}
	return nil
}

// checkChars names the first character a key may not hold, in words a user
// of any language reads without knowing byte values.
func checkChars(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ':
			return keyError("must not contain spaces")
		case c == '\t':
			return keyError("must not contain tabs")
		case c == '\n' || c == '\r':
			return keyError("must not contain line breaks")
		case c < ' ' || c == 0x7f:
			return keyError("must not contain control characters")
		case c > '~':
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size <= 1 {
				return keyError("must be ASCII text: letters, digits and punctuation such as . - _ / : (it holds bytes that are not UTF-8 text)")
			}
			return keyError("must be ASCII text: letters, digits and punctuation such as . - _ / : (%q is not ASCII)", r)
		case c == '*' || c == '>':
			return keyError("must not contain %q: it is a NATS wildcard", c)
		}
	}
	return nil
}
