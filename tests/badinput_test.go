package tests

import (
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// Every kind of bad input gets its error reply, changes nothing, and leaves
// the service answering.
func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	lease := c.grant(60)
	c.put("ok.k", 1, lease)
	kvsBefore, leasesBefore := c.fullState()

	const bad = schema.ErrInvalidRequest
	long := strings.Repeat("a", 1025)
	cases := []struct {
		name string
		ep   subjects.Endpoint
		body string
		want string
		// mention must appear in the description (the field it names).
		mention string
	}{
		{"empty body", subjects.KVPut, ``, bad, "empty"},
		{"malformed json", subjects.KVPut, `{"key":`, bad, "JSON"},
		{"not an object", subjects.KVPut, `[1,2]`, bad, "object"},
		{"null body", subjects.LeaseGrant, `null`, bad, "object"},
		{"trailing data", subjects.LeaseGrant, `{"ttl":5} {"ttl":6}`, bad, "after"},
		{"unknown field", subjects.LeaseGrant, `{"ttl":5,"tll":6}`, bad, `"tll"`},
		{"wrong type ttl", subjects.LeaseGrant, `{"ttl":"10s"}`, bad, `ttl must be a whole number of seconds, not the string "10s"`},
		{"fractional ttl", subjects.LeaseGrant, `{"ttl":1.5}`, bad, "ttl must be a whole number of seconds"},
		{"zero ttl", subjects.LeaseGrant, `{"ttl":0}`, bad, "ttl"},
		{"negative ttl", subjects.LeaseGrant, `{"ttl":-3}`, bad, "ttl"},
		{"missing ttl", subjects.LeaseGrant, `{}`, bad, "ttl is required"},
		{"huge ttl", subjects.LeaseGrant, `{"ttl":9223372036854775807}`, bad, "ttl"},
		{"negative id", subjects.LeaseGrant, `{"ttl":5,"id":-1}`, bad, "id"},
		{"id beyond 2^53", subjects.LeaseGrant, `{"ttl":5,"id":9007199254740992}`, bad, "id"},
		{"metadata not object", subjects.LeaseGrant, `{"ttl":5,"metadata":[1]}`, bad, "metadata"},
		{"metadata too large", subjects.LeaseGrant, `{"ttl":5,"metadata":{"x":"` + strings.Repeat("m", 8200) + `"}}`, schema.ErrTooLarge, "metadata"},
		{"keepalive zero ttl", subjects.LeaseKeepAlive, `{"id":1,"ttl":0}`, bad, "ttl"},
		{"keepalive missing id", subjects.LeaseKeepAlive, `{}`, bad, "id"},
		{"keepalive unknown lease", subjects.LeaseKeepAlive, `{"id":4242}`, schema.ErrLeaseNotFound, "4242"},
		{"revoke unknown lease", subjects.LeaseRevoke, `{"id":4242}`, schema.ErrLeaseNotFound, "4242"},
		{"revoke wrong type", subjects.LeaseRevoke, `{"id":true}`, bad, "id must be a lease id"},
		{"info unknown lease", subjects.LeaseInfo, `{"id":4242}`, schema.ErrLeaseNotFound, "4242"},
		{"info zero id", subjects.LeaseInfo, `{"id":0}`, bad, "id"},
		{"list negative limit", subjects.LeaseList, `{"limit":-1}`, bad, "limit"},
		{"list huge limit", subjects.LeaseList, `{"limit":10001}`, bad, "limit"},
		{"list negative after", subjects.LeaseList, `{"after":-5}`, bad, "after"},
		{"put missing key", subjects.KVPut, `{"value":1}`, bad, "key"},
		{"put missing value", subjects.KVPut, `{"key":"a"}`, bad, "value"},
		{"put key with space", subjects.KVPut, `{"key":"a b","value":1}`, bad, "key must not contain spaces"},
		{"put key with star", subjects.KVPut, `{"key":"a.*","value":1}`, bad, "key"},
		{"put key with gt", subjects.KVPut, `{"key":"a.>","value":1}`, bad, "key"},
		{"put key empty token", subjects.KVPut, `{"key":"a..b","value":1}`, bad, "key"},
		{"put key leading dot", subjects.KVPut, `{"key":".a","value":1}`, bad, "key"},
		{"put key trailing dot", subjects.KVPut, `{"key":"a.","value":1}`, bad, "key"},
		{"put key non-ascii", subjects.KVPut, `{"key":"caf\u00e9","value":1}`, bad, "key"},
		{"put key too long", subjects.KVPut, `{"key":"` + long + `","value":1}`, bad, "key"},
		{"put lease and ttl", subjects.KVPut, `{"key":"a","value":1,"lease":1,"ttl":5}`, bad, "lease and ttl"},
		{"put lease 0 and ttl", subjects.KVPut, `{"key":"a","value":1,"lease":0,"ttl":5}`, bad, "lease and ttl"},
		{"put zero ttl", subjects.KVPut, `{"key":"a","value":1,"ttl":0}`, bad, "ttl"},
		{"put negative lease", subjects.KVPut, `{"key":"a","value":1,"lease":-2}`, bad, "lease"},
		{"put unknown lease", subjects.KVPut, `{"key":"a","value":1,"lease":4242}`, schema.ErrLeaseNotFound, "4242"},
		{"put value too large", subjects.KVPut, `{"key":"a","value":"` + strings.Repeat("v", 1<<20) + `"}`, schema.ErrTooLarge, "value"},
		{"get key and prefix", subjects.KVGet, `{"key":"a","prefix":"a"}`, bad, "key and prefix"},
		{"get neither", subjects.KVGet, `{}`, bad, "key or prefix"},
		{"get bad prefix", subjects.KVGet, `{"prefix":"a b"}`, bad, "prefix"},
		{"get after without prefix", subjects.KVGet, `{"key":"a","after":"a"}`, bad, "after"},
		{"get huge limit", subjects.KVGet, `{"prefix":"","limit":10001}`, bad, "limit"},
		{"delete neither", subjects.KVDelete, `{}`, bad, "key or prefix"},
		{"delete bad key", subjects.KVDelete, `{"key":"a.>"}`, bad, "key"},
		{"delete unknown field", subjects.KVDelete, `{"key":"a","recursive":true}`, bad, `"recursive"`},
		{"put idempotency key with control", subjects.KVPut, `{"key":"a","value":1,"idempotency_key":"a\u0001b"}`, bad, "idempotency_key"},
		{"put idempotency key too long", subjects.KVPut, `{"key":"a","value":1,"idempotency_key":"` + strings.Repeat("i", 257) + `"}`, bad, "idempotency_key"},
		{"txn unknown target", subjects.KVTxn, `{"compare":[{"key":"a","target":"size","op":"==","value":1}]}`, bad, "compare[0].target"},
		{"txn unknown op", subjects.KVTxn, `{"compare":[{"key":"a","target":"version","op":"=~","value":1}]}`, bad, "compare[0].op"},
		{"txn ordering on exists", subjects.KVTxn, `{"compare":[{"key":"a","target":"exists","op":"<","value":true}]}`, bad, "== or !="},
		{"txn ordering on value", subjects.KVTxn, `{"compare":[{"key":"a","target":"value","op":">","value":1}]}`, bad, "== or !="},
		{"txn ordering on lease", subjects.KVTxn, `{"compare":[{"key":"a","target":"lease","op":">=","value":1}]}`, bad, "== or !="},
		{"txn exists with a number", subjects.KVTxn, `{"compare":[{"key":"a","target":"exists","op":"==","value":1}]}`, bad, "true or false"},
		{"txn version with a string", subjects.KVTxn, `{"compare":[{"key":"a","target":"version","op":"==","value":"1"}]}`, bad, "whole number"},
		{"txn version fractional", subjects.KVTxn, `{"compare":[{"key":"a","target":"version","op":"==","value":1.5}]}`, bad, "whole number"},
		{"txn put ttl wrong type", subjects.KVTxn, `{"success":[{"get":{"key":"a"}},{"put":{"key":"a","value":1,"ttl":"5"}}]}`, bad, "success[1].put.ttl must be a whole number of seconds"},
		{"txn negative lease", subjects.KVTxn, `{"compare":[{"key":"a","target":"lease","op":"==","value":-1}]}`, bad, "lease"},
		{"txn compare without value", subjects.KVTxn, `{"compare":[{"key":"a","target":"version","op":"=="}]}`, bad, "value"},
		{"txn field without path", subjects.KVTxn, `{"compare":[{"key":"a","target":"field","op":"==","value":1}]}`, bad, "path"},
		{"txn bad pointer", subjects.KVTxn, `{"compare":[{"key":"a","target":"field","path":"status","op":"==","value":1}]}`, bad, "JSON Pointer"},
		{"txn path on version", subjects.KVTxn, `{"compare":[{"key":"a","target":"version","path":"/x","op":"==","value":1}]}`, bad, "path"},
		{"txn compare bad key", subjects.KVTxn, `{"compare":[{"key":"a.*","target":"version","op":"==","value":1}]}`, bad, "compare[0].key"},
		{"txn duplicate compare", subjects.KVTxn, `{"compare":[{"key":"a","target":"version","op":">","value":1},{"key":"a","target":"version","op":"<","value":5}]}`, bad, "second"},
		{"txn op with two kinds", subjects.KVTxn, `{"success":[{"put":{"key":"a","value":1},"get":{"key":"a"}}]}`, bad, "success[0]"},
		{"txn empty op", subjects.KVTxn, `{"failure":[{}]}`, bad, "failure[0]"},
		{"txn get serializable", subjects.KVTxn, `{"success":[{"get":{"key":"a","serializable":true}}]}`, bad, `"serializable"`},
		{"txn get limit", subjects.KVTxn, `{"success":[{"get":{"prefix":"a","limit":1001}}]}`, bad, "success[0].get.limit"},
		{"txn delete limit", subjects.KVTxn, `{"success":[{"delete":{"prefix":"a","limit":1001}}]}`, bad, "success[0].delete.limit"},
		{"txn put lease and ttl", subjects.KVTxn, `{"success":[{"put":{"key":"a","value":1,"lease":1,"ttl":5}}]}`, bad, "success[0].put.lease"},
		{"txn too many compares", subjects.KVTxn, `{"compare":[` + strings.TrimSuffix(strings.Repeat(`{"key":"a","target":"exists","op":"==","value":true},`, 65), ",") + `]}`, bad, "65 compares"},
		{"txn too many operations", subjects.KVTxn, `{"success":[` + strings.TrimSuffix(strings.Repeat(`{"get":{"key":"a"}},`, 129), ",") + `]}`, bad, "129 operations"},
		{"txn too large", subjects.KVTxn, `{"success":[{"put":{"key":"a","value":"` + strings.Repeat("v", 1<<20) + `"}}],"failure":[]}`, schema.ErrTooLarge, "transaction"},
		{"txn idempotency key too long", subjects.KVTxn, `{"idempotency_key":"` + strings.Repeat("i", 257) + `"}`, bad, "idempotency_key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc := &client{t: t, nc: c.nc, names: c.names}
			e := cc.fails(tc.ep, tc.body, tc.want)
			if !strings.Contains(e.Description, tc.mention) {
				t.Errorf("description %q does not mention %q", e.Description, tc.mention)
			}
			// Descriptions are for users of any language: no Go types,
			// no decoder internals, no byte values.
			for _, word := range []string{"int64", "float64", "Go ", "struct", "JSON string", "json:", "unmarshal", "0x", "printable ASCII"} {
				if strings.Contains(e.Description, word) {
					t.Errorf("description %q says %q", e.Description, word)
				}
			}
		})
	}

	kvsAfter, leasesAfter := c.fullState()
	if kvsAfter.Revision != kvsBefore.Revision || len(kvsAfter.KVs) != len(kvsBefore.KVs) || len(leasesAfter) != len(leasesBefore) {
		t.Fatalf("bad input changed state: revision %d -> %d, %d -> %d keys, %d -> %d leases",
			kvsBefore.Revision, kvsAfter.Revision, len(kvsBefore.KVs), len(kvsAfter.KVs), len(leasesBefore), len(leasesAfter))
	}
	// Still serving.
	c.put("ok.after", 2, lease)
}
