package schema

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/concord-io/concord/subjects"
)

// numericKeywords are the JSON Schema keywords that state a limit.
var numericKeywords = []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "minLength", "maxLength"}

// limitRequests are the requests whose rules the server's request decoders
// check (the cluster requests are checked by their handlers).
var limitRequests = []string{
	"kv.changes.request", "kv.delete.request", "kv.get.request", "kv.put.request", "kv.txn.request",
	"kv.history.request", "kv.compact.request",
	"lease.grant.request", "lease.info.request", "lease.keepalive.request", "lease.keepalive_many.request",
	"lease.list.request", "lease.revoke.request",
}

// schemaLimits collects every number a numeric keyword states in the
// schemas of names and in the definitions they reach through $ref, keyed
// by "<document>#<JSON pointer>/<keyword>". Examples are left out.
func schemaLimits(t *testing.T, names []string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	seen := map[string]bool{}
	var walk func(doc, ptr string, v any)
	walk = func(doc, ptr string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				switch {
				case k == "examples":
				case k == "$ref":
					ref := x.(string)
					if !strings.Contains(ref, "#") {
						continue // a whole message: a reply, not a request rule
					}
					newDoc, at, obj := resolveRef(t, doc, ref)
					if !seen[at] {
						seen[at] = true
						_, frag, _ := strings.Cut(at, "#")
						walk(newDoc, frag, obj)
					}
				case slices.Contains(numericKeywords, k):
					n, ok := x.(float64)
					if !ok {
						t.Errorf("%s#%s/%s is not a number: %v", doc, ptr, k, x)
						continue
					}
					out[doc+"#"+ptr+"/"+k] = n
				default:
					walk(doc, ptr+"/"+k, x)
				}
			}
		case []any:
			for i, x := range v {
				walk(doc, fmt.Sprintf("%s/%d", ptr, i), x)
			}
		}
	}
	for _, name := range names {
		walk(name, "", rawDoc(t, name))
	}
	return out
}

// TestSchemaLimitsMatchGo checks every number the request schemas state
// against the Go constant the server enforces (limits.go, and the key rules
// of the subjects package), so that a limit is defined in Go and checked in
// the static schemas. A number the table does not know fails too: a new
// rule in a schema needs its Go constant here. Schemas state the defaults
// of the limits an operator may change.
func TestSchemaLimitsMatchGo(t *testing.T) {
	want := map[string]float64{
		"defs#/$defs/key/minLength":                                     1,
		"defs#/$defs/key/maxLength":                                     subjects.MaxKeyBytes,
		"defs#/$defs/prefix/maxLength":                                  subjects.MaxKeyBytes,
		"defs#/$defs/range_bound/maxLength":                             subjects.MaxKeyBytes,
		"defs#/$defs/content_type/maxLength":                            MaxContentTypeBytes,
		"kv.get.request#/properties/range_end/minLength":                1,
		"kv.delete.request#/properties/range_end/minLength":             1,
		"kv.changes.request#/properties/range_end/minLength":            1,
		"defs#/$defs/lease_id/minimum":                                  1,
		"defs#/$defs/lease_id/maximum":                                  MaxLeaseID,
		"defs#/$defs/revision/minimum":                                  0,
		"defs#/$defs/revision/maximum":                                  MaxLeaseID, // the same bound: exact in a float64
		"defs#/$defs/ttl/minimum":                                       DefaultMinTTL,
		"defs#/$defs/ttl/maximum":                                       MaxTTL,
		"defs#/$defs/limit/minimum":                                     0,
		"defs#/$defs/limit/maximum":                                     MaxListLimit,
		"defs#/$defs/idempotency_key/minLength":                         1,
		"defs#/$defs/idempotency_key/maxLength":                         MaxIdempotencyKeyBytes,
		"defs#/$defs/txn_compare/allOf/3/then/properties/value/minimum": 0,
		"defs#/$defs/txn_compare/allOf/3/then/properties/value/maximum": MaxLeaseID,
		"defs#/$defs/txn_put/properties/lease/minimum":                  0,
		"defs#/$defs/txn_put/properties/lease/maximum":                  MaxLeaseID,
		"defs#/$defs/txn_get/properties/limit/maximum":                  MaxTxnPrefixLimit,
		"defs#/$defs/txn_delete/properties/limit/minimum":               0,
		"defs#/$defs/txn_delete/properties/limit/maximum":               MaxTxnPrefixLimit,
		"kv.changes.request#/properties/after_op_index/minimum":         -1,
		"kv.changes.request#/properties/limit/minimum":                  0,
		"kv.changes.request#/properties/limit/maximum":                  MaxChangesLimit,
		"kv.history.request#/properties/limit/minimum":                  0,
		"kv.history.request#/properties/limit/maximum":                  MaxHistoryLimit,
		"kv.compact.request#/properties/revision/minimum":               1,
		"kv.compact.request#/properties/revision/maximum":               MaxRevision,
		"kv.put.request#/properties/lease/minimum":                      0,
		"kv.put.request#/properties/lease/maximum":                      MaxLeaseID,
		"kv.txn.request#/properties/compare/maxItems":                   DefaultMaxTxnCompares,
		"kv.txn.request#/properties/success/maxItems":                   DefaultMaxTxnOps,
		"kv.txn.request#/properties/failure/maxItems":                   DefaultMaxTxnOps,
		"lease.grant.request#/properties/id/minimum":                    0,
		"lease.grant.request#/properties/id/maximum":                    MaxLeaseID,
		"lease.keepalive_many.request#/properties/ids/minItems":         1,
		"lease.keepalive_many.request#/properties/ids/maxItems":         MaxKeepAliveMany,
		"lease.list.request#/properties/after/minimum":                  0,
		"lease.list.request#/properties/after/maximum":                  MaxLeaseID,
	}
	got := schemaLimits(t, limitRequests)
	for at, n := range got {
		w, ok := want[at]
		switch {
		case !ok:
			t.Errorf("%s is %v: no Go constant is known for it; add it to the table", at, n)
		case n != w:
			t.Errorf("%s is %v, the Go constant %v", at, n, w)
		}
	}
	for at := range want {
		if _, ok := got[at]; !ok {
			t.Errorf("%s: the schemas no longer state it; drop it from the table", at)
		}
	}
}

// TestSchemaTextLimitsMatchGo checks the numbers that only the schemas'
// descriptions and patterns state, such as the sizes the server checks
// and the defaults of a limit.
func TestSchemaTextLimitsMatchGo(t *testing.T) {
	defs := rawDoc(t, "defs")["$defs"].(map[string]any)
	def := func(name string) map[string]any { return defs[name].(map[string]any) }
	prop := func(obj map[string]any, name string) map[string]any {
		return obj["properties"].(map[string]any)[name].(map[string]any)
	}
	cases := []struct {
		at, text, want string
	}{
		{"defs metadata", def("metadata")["description"].(string), fmt.Sprintf("at most %d KiB", DefaultMaxMetadataBytes>>10)},
		{"defs value", def("value")["description"].(string), fmt.Sprintf("at most %d MiB", DefaultMaxValueBytes>>20)},
		{"defs limit", def("limit")["description"].(string), fmt.Sprintf("1 to %d; 0 or absent means the default (%d)", MaxListLimit, DefaultListLimit)},
		{"defs ttl", def("ttl")["description"].(string), fmt.Sprintf("at least %d", DefaultMinTTL)},
		{"defs idempotency_key", def("idempotency_key")["description"].(string), fmt.Sprintf("1 to %d characters", MaxIdempotencyKeyBytes)},
		{"defs idempotency_key", def("idempotency_key")["description"].(string), fmt.Sprintf("by default %s entries and %s revisions", thousands(DefaultIdempotencyEntries), thousands(DefaultIdempotencyRevisions))},
		{"defs idempotency_key pattern", def("idempotency_key")["pattern"].(string), fmt.Sprintf("{1,%d}", MaxIdempotencyKeyBytes)},
		{"defs txn_get limit", prop(def("txn_get"), "limit")["description"].(string), fmt.Sprintf("1 to %d inside a transaction; 0 or absent means %d", MaxTxnPrefixLimit, MaxTxnPrefixLimit)},
		{"defs txn_delete limit", prop(def("txn_delete"), "limit")["description"].(string), fmt.Sprintf("0 or absent means %d", MaxTxnPrefixLimit)},
		{"lease.grant.request", rawDoc(t, "lease.grant.request")["description"].(string), fmt.Sprintf("at most %d KiB", DefaultMaxMetadataBytes>>10)},
		{"lease.keepalive_many.request", rawDoc(t, "lease.keepalive_many.request")["description"].(string), fmt.Sprintf("1 to %d ids", MaxKeepAliveMany)},
		{"kv.get.request", rawDoc(t, "kv.get.request")["description"].(string), fmt.Sprintf("default %d, at most %d", DefaultListLimit, MaxListLimit)},
		{"kv.put.request", rawDoc(t, "kv.put.request")["description"].(string), fmt.Sprintf("at most %d MiB", DefaultMaxValueBytes>>20)},
		{"kv.changes.request", rawDoc(t, "kv.changes.request")["description"].(string), fmt.Sprintf("default %d, at most %d", DefaultChangesLimit, MaxChangesLimit)},
		{"kv.changes.request limit", prop(rawDoc(t, "kv.changes.request"), "limit")["description"].(string), fmt.Sprintf("1 to %d; 0 or absent means the default (%d)", MaxChangesLimit, DefaultChangesLimit)},
		{"kv.txn.request", rawDoc(t, "kv.txn.request")["description"].(string), fmt.Sprintf("%d compares, %d operations per branch, %d MiB request", DefaultMaxTxnCompares, DefaultMaxTxnOps, DefaultMaxTxnBytes>>20)},
	}
	for _, c := range cases {
		if !strings.Contains(c.text, c.want) {
			t.Errorf("%s: %q does not say %q", c.at, c.text, c.want)
		}
	}
}

// thousands writes n with commas between groups of three digits.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 10_000: "10,000", 100_000: "100,000", 1_000_000: "1,000,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
