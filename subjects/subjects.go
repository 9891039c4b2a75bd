// Package subjects is the one place that knows Concord's NATS subject names
// and the rules that make every key a literal NATS subject suffix, so that a
// watcher can subscribe to P.watch.<key> or P.watch.<prefix>.> directly.
package subjects

import (
	"errors"
	"fmt"
	"strings"
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

	LeaseKeepAliveMany Endpoint = "lease.keepalive_many"

	ClusterJoin     Endpoint = "cluster.join"
	ClusterRemove   Endpoint = "cluster.remove"
	ClusterStatus   Endpoint = "cluster.status"
	ClusterSnapshot Endpoint = "cluster.snapshot"

	// ClusterBackup makes the leader take a backup, and ClusterBackupChunk
	// reads it, one chunk per request (schema.ClusterBackupReply).
	ClusterBackup      Endpoint = "cluster.backup"
	ClusterBackupChunk Endpoint = "cluster.backup.chunk"
)

// Endpoints lists every request endpoint in a stable order.
var Endpoints = []Endpoint{LeaseGrant, LeaseKeepAlive, LeaseKeepAliveMany, LeaseRevoke, LeaseInfo, LeaseList,
	KVPut, KVGet, KVDelete, KVTxn, KVChanges,
	ClusterJoin, ClusterRemove, ClusterStatus, ClusterSnapshot, ClusterBackup, ClusterBackupChunk}

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
		return fmt.Errorf("node id %q: 1 to 64 characters", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("node id %q: only letters, digits, '-' and '_'", id)
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

// WatchAll returns the wildcard subject that matches every watch event.
func (n Names) WatchAll() string { return n.prefix + ".watch.>" }

// ValidateKey checks the key rules: 1..maxBytes bytes of printable ASCII
// without space, '*' or '>', in '.'-separated tokens with no empty token.
// Those rules are exactly what makes "P.watch." + key a literal NATS subject.
func ValidateKey(key string, maxBytes int) error {
	if key == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalidKey)
	}
	if len(key) > maxBytes {
		return fmt.Errorf("%w: key is %d bytes, more than %d", ErrInvalidKey, len(key), maxBytes)
	}
	if err := checkChars(key); err != nil {
		return err
	}
	if key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return fmt.Errorf("%w: key %q has an empty token", ErrInvalidKey, key)
	}
	return nil
}

// ValidatePrefix checks a key prefix used by ranged reads and deletes. The
// empty prefix matches every key; otherwise the prefix must be the start of
// some valid key (it may end with '.' or inside a token).
func ValidatePrefix(prefix string, maxBytes int) error {
	if prefix == "" {
		return nil
	}
	if len(prefix) > maxBytes {
		return fmt.Errorf("%w: prefix is %d bytes, more than %d", ErrInvalidKey, len(prefix), maxBytes)
	}
	if err := checkChars(prefix); err != nil {
		return err
	}
	if prefix[0] == '.' || strings.Contains(prefix, "..") {
		return fmt.Errorf("%w: prefix %q has an empty token", ErrInvalidKey, prefix)
	}
	return nil
}

func checkChars(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c <= ' ' || c > '~':
			return fmt.Errorf("%w: byte %d (0x%02x) is not printable ASCII", ErrInvalidKey, i, c)
		case c == '*' || c == '>':
			return fmt.Errorf("%w: byte %d is the wildcard %q", ErrInvalidKey, i, c)
		}
	}
	return nil
}
