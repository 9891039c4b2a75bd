// Package schematest holds request bodies, valid and invalid, for the
// requests that the server's request decoders check (lease.* and kv.*).
// The schema tests judge them by the JSON Schemas, and the service tests
// judge them by the decoders and demand the same verdict, so that the two
// statements of the request rules are held to one set of examples.
package schematest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/concord-io/concord/schema"
)

// Example is a request body for the message Message (a schema name such as
// "kv.put.request").
type Example struct {
	Message string
	Body    string
}

// ValidRequests returns requests that both the schemas and the server
// accept.
func ValidRequests() []Example {
	key := "svc.api.n1"
	prefix := "svc."
	empty := ""
	return []Example{
		// lease.grant
		{"lease.grant.request", js(schema.LeaseGrantRequest{TTL: 10})},
		{"lease.grant.request", js(schema.LeaseGrantRequest{TTL: 1, ID: 42, Metadata: json.RawMessage(`{"owner":"billing","tags":["a","b"]}`)})},
		{"lease.grant.request", `{"ttl":10,"id":0}`},
		{"lease.grant.request", `{"ttl":10,"metadata":{}}`},
		// lease.keepalive
		{"lease.keepalive.request", js(schema.LeaseKeepAliveRequest{ID: 1})},
		{"lease.keepalive.request", js(schema.LeaseKeepAliveRequest{ID: 1, TTL: ptr[int64](60)})},
		// lease.keepalive_many
		{"lease.keepalive_many.request", js(schema.LeaseKeepAliveManyRequest{IDs: []int64{1}})},
		{"lease.keepalive_many.request", js(schema.LeaseKeepAliveManyRequest{IDs: []int64{1, 7, 42, 9007199254740991}})},
		{"lease.keepalive_many.request", `{"ids":[1,1]}`}, // the server renews a repeated id twice
		{"lease.keepalive_many.request", `{"ids":[` + repeatJSON("1", 10000) + `]}`},
		// lease.revoke
		{"lease.revoke.request", js(schema.LeaseRevokeRequest{ID: 3})},
		// lease.info
		{"lease.info.request", js(schema.LeaseInfoRequest{ID: 1})},
		{"lease.info.request", js(schema.LeaseInfoRequest{ID: 1, Keys: true})},
		// lease.list
		{"lease.list.request", js(schema.LeaseListRequest{})},
		{"lease.list.request", js(schema.LeaseListRequest{IncludeAnonymous: true, Limit: 10000, After: 250})},
		{"lease.list.request", `{"limit":1,"after":0}`},
		// kv.put
		{"kv.put.request", js(schema.KVPutRequest{Key: key, Value: json.RawMessage(`{"addr":"10.0.0.5"}`), Lease: ptr[int64](1)})},
		{"kv.put.request", js(schema.KVPutRequest{Key: "locks.job7", Value: json.RawMessage(`"worker-3"`), TTL: ptr[int64](15), PrevKV: true})},
		{"kv.put.request", js(schema.KVPutRequest{Key: "config", Value: json.RawMessage(`null`)})},
		{"kv.put.request", `{"key":"a","value":[1,2,{"x":true}]}`},
		{"kv.put.request", `{"key":"a","value":0,"lease":0}`},
		{"kv.put.request", `{"key":"a!\"#$%&'()+,-/09:;<=?@AZ[\\]^_` + "`" + `az{|}~","value":1}`},
		{"kv.put.request", js(schema.KVPutRequest{Key: strings.Repeat("k", 1024), Value: json.RawMessage(`1`)})},
		// kv.get
		{"kv.get.request", js(schema.KVGetRequest{Key: &key})},
		{"kv.get.request", js(schema.KVGetRequest{Prefix: &prefix, Limit: 100, After: "svc.api.n1", KeysOnly: true})},
		{"kv.get.request", js(schema.KVGetRequest{Prefix: &empty, CountOnly: true, Serializable: true})},
		{"kv.get.request", `{"prefix":"svc.ap"}`},
		{"kv.get.request", `{"prefix":"a","revision":3}`},
		{"kv.put.request", `{"key":"a","value":1,"content_type":"application/json; charset=utf-8","metadata":{"owner":"ops","n":[1,2]}}`},
		{"kv.put.request", `{"key":"a","value":1,"metadata":{}}`},
		{"kv.put.request", `{"key":"a","value":1,"content_type":""}`},
		{"kv.txn.request", `{"success":[{"put":{"key":"a","value":1,"content_type":"text/plain","metadata":{"m":true}}}]}`},
		{"kv.get.request", `{"range_start":"a","range_end":"b"}`},
		{"kv.get.request", `{"range_start":""}`},
		{"kv.get.request", `{"range_start":"svc.","range_end":"svc/","revision":2,"limit":5,"after":"svc.a"}`},
		{"kv.get.request", `{"range_start":"a*","range_end":"a>"}`},
		{"kv.delete.request", `{"range_start":"tmp.","range_end":"tmp/","prev_kv":true}`},
		{"kv.delete.request", `{"range_start":"z"}`},
		{"kv.changes.request", `{"range_start":"a","range_end":"m","after_revision":0}`},
		{"kv.get.request", `{"key":"a","revision":0}`},
		{"kv.history.request", `{"key":"a"}`},
		{"kv.history.request", `{"key":"a","from_revision":2,"to_revision":2,"limit":1000,"after_revision":1,"newest_first":true,"serializable":true}`},
		{"kv.history.request", `{"key":"a","to_revision":5}`},
		{"kv.compact.request", `{"revision":1}`},
		{"kv.compact.request", `{"revision":9007199254740991}`},
		// kv.delete
		{"kv.delete.request", js(schema.KVDeleteRequest{Key: &key})},
		{"kv.delete.request", js(schema.KVDeleteRequest{Prefix: &prefix, PrevKV: true})},
		{"kv.delete.request", js(schema.KVDeleteRequest{Prefix: &empty})},
		// kv.changes
		{"kv.changes.request", js(schema.KVChangesRequest{Key: &key})}, // after_revision 0
		{"kv.changes.request", js(schema.KVChangesRequest{Prefix: &prefix, AfterRevision: 1843, AfterOpIndex: ptr(2), Limit: 1000})},
		{"kv.changes.request", js(schema.KVChangesRequest{Prefix: &empty, AfterRevision: 9007199254740991, AfterOpIndex: ptr(-1), Limit: 1})},
		{"kv.changes.request", js(schema.KVChangesRequest{Key: &key, AfterRevision: 5, AfterOpIndex: ptr(0)})},
		{"kv.changes.request", `{"prefix":"svc.ap","after_revision":0,"limit":0}`},
		// kv.put and kv.delete with an idempotency key
		{"kv.put.request", js(schema.KVPutRequest{Key: key, Value: json.RawMessage(`{"addr":"10.0.0.5"}`), Lease: ptr[int64](1), PrevKV: true, IdempotencyKey: "n1:req-1842"})},
		{"kv.put.request", `{"key":"a","value":1,"idempotency_key":" "}`},
		{"kv.put.request", js(map[string]any{"key": "a", "value": 1, "idempotency_key": printableASCII + strings.Repeat("x", 256-len(printableASCII))})},
		{"kv.delete.request", js(schema.KVDeleteRequest{Key: &key, IdempotencyKey: "n1:req-1843"})},
		{"kv.delete.request", js(schema.KVDeleteRequest{Prefix: &prefix, PrevKV: true, IdempotencyKey: printableASCII})},
		// kv.txn
		{"kv.txn.request", issueTxnExample},
		{"kv.txn.request", js(schema.KVTxnRequest{ // a lock acquire
			Compare: []schema.TxnCompare{{Key: "locks.build", Target: schema.TargetCreateRevision, Op: "==", Value: json.RawMessage(`0`)}},
			Success: []schema.TxnOp{{Put: &schema.TxnPut{Key: "locks.build", Value: json.RawMessage(`"n1"`), Lease: ptr[int64](42)}}},
			Failure: []schema.TxnOp{{Get: &schema.TxnGet{Key: ptr("locks.build")}}},
		})},
		{"kv.txn.request", js(schema.KVTxnRequest{ // a field compare
			Compare: []schema.TxnCompare{{Key: "jobs.7.state", Target: schema.TargetField, Path: ptr("/status"), Op: "==", Value: json.RawMessage(`"pending"`)}},
			Success: []schema.TxnOp{{Put: &schema.TxnPut{Key: "jobs.7.state", Value: json.RawMessage(`{"status":"running","worker":"n1"}`)}}},
		})},
		{"kv.txn.request", `{}`},
		{"kv.txn.request", `{"compare":[],"success":[],"failure":[]}`},
		{"kv.txn.request", js(sampleTxnRequest())},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"field","path":"","op":"!=","value":null}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"field","path":"/a~1b/~0c/0/","op":">=","value":[1,{"x":true}]}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"exists","op":"!=","value":false}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"value","op":"==","value":null}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"lease","op":"==","value":0},{"key":"b","target":"lease","op":"!=","value":9007199254740991}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"ttl","op":"<","value":5},{"key":"a","target":"version","op":">","value":-1},{"key":"a","target":"mod_revision","op":"<=","value":3.0}]}`},
		{"kv.txn.request", `{"compare":[` + versionCompares(64) + `]}`}, // the most compares
		{"kv.txn.request", `{"success":[` + repeatJSON(`{"get":{"key":"a"}}`, 128) + `],"failure":[` + repeatJSON(`{"delete":{"key":"a"}}`, 128) + `]}`},
		{"kv.txn.request", `{"success":[{"get":{"prefix":"","limit":1000}},{"delete":{"prefix":"","limit":1000}},{"delete":{"key":"a","limit":0}}],"idempotency_key":"x"}`},
	}
}

// InvalidRequests returns requests that the schemas refuse. The server
// refuses them too, except where the schemas are stricter than it is; the
// service's tests list those exceptions, each with its reason.
func InvalidRequests() []Example {
	return []Example{
		// lease.grant
		{"lease.grant.request", `{}`},                               // missing ttl
		{"lease.grant.request", `{"ttl":0}`},                        // ttl 0
		{"lease.grant.request", `{"ttl":-5}`},                       // negative ttl
		{"lease.grant.request", `{"ttl":1.5}`},                      // fractional ttl
		{"lease.grant.request", `{"ttl":"10"}`},                     // wrong type
		{"lease.grant.request", `{"ttl":10,"id":-1}`},               // negative id
		{"lease.grant.request", `{"ttl":10,"id":9007199254740992}`}, // id beyond 2^53-1
		{"lease.grant.request", `{"ttl":10,"metadata":"owner=x"}`},  // metadata not an object
		{"lease.grant.request", `{"ttl":10,"metadata":[1]}`},        // metadata not an object
		{"lease.grant.request", `{"ttl":10,"metadata":null}`},       // metadata not an object
		{"lease.grant.request", `{"ttl":10,"lease":1}`},             // unknown field
		{"lease.grant.request", `[{"ttl":10}]`},                     // not an object
		{"lease.keepalive.request", `{"id":0}`},                     // id 0
		{"lease.keepalive.request", `{"ttl":10}`},                   // missing id
		{"lease.keepalive.request", `{"id":1,"ttl":0}`},             // ttl 0
		{"lease.keepalive.request", `{"id":"1"}`},                   // wrong type
		// lease.keepalive_many
		{"lease.keepalive_many.request", `{}`},                                       // missing ids
		{"lease.keepalive_many.request", `{"ids":[]}`},                               // empty ids
		{"lease.keepalive_many.request", `{"ids":null}`},                             // ids null
		{"lease.keepalive_many.request", `{"ids":[0]}`},                              // id 0
		{"lease.keepalive_many.request", `{"ids":[1,-2]}`},                           // negative id
		{"lease.keepalive_many.request", `{"ids":[9007199254740992]}`},               // id beyond 2^53-1
		{"lease.keepalive_many.request", `{"ids":[1.5]}`},                            // fractional id
		{"lease.keepalive_many.request", `{"ids":["1"]}`},                            // wrong type
		{"lease.keepalive_many.request", `{"ids":1}`},                                // not an array
		{"lease.keepalive_many.request", `{"ids":[` + repeatJSON("1", 10001) + `]}`}, // 10001 ids
		{"lease.keepalive_many.request", `{"ids":[1],"ttl":10}`},                     // unknown field
		{"lease.keepalive_many.request", `[1]`},                                      // not an object
		{"lease.revoke.request", `{}`},
		{"lease.revoke.request", `{"id":1,"keys":true}`},
		{"lease.info.request", `{"id":1,"keys":"yes"}`},
		{"lease.info.request", `{"id":-3}`},
		{"lease.list.request", `{"limit":-1}`},
		{"lease.list.request", `{"limit":10001}`},
		{"lease.list.request", `{"after":-1}`},
		{"lease.list.request", `{"include_anonymous":1}`},
		{"lease.list.request", `{"prefix":""}`},
		// kv.put
		{"kv.put.request", `{"key":"a"}`},                              // missing value
		{"kv.put.request", `{"value":1}`},                              // missing key
		{"kv.put.request", `{"key":"a","value":1,"lease":1,"ttl":10}`}, // lease and ttl
		{"kv.put.request", `{"key":"a","value":1,"lease":0,"ttl":10}`}, // lease and ttl present
		{"kv.put.request", `{"key":"a","value":1,"ttl":0}`},            // ttl 0
		{"kv.put.request", `{"key":"a","value":1,"lease":-1}`},
		{"kv.put.request", `{"key":"a","value":1,"lease":"1"}`},
		{"kv.put.request", `{"key":"a","value":1,"prev_kv":"true"}`},
		{"kv.put.request", `{"key":"a","value":1,"version":3}`}, // unknown field
		{"kv.put.request", `{"key":"","value":1}`},
		{"kv.put.request", `{"key":"svc api","value":1}`},
		{"kv.put.request", `{"key":"svc.*","value":1}`},
		{"kv.put.request", `{"key":"svc.>","value":1}`},
		{"kv.put.request", `{"key":"svc..api","value":1}`},
		{"kv.put.request", `{"key":".svc","value":1}`},
		{"kv.put.request", `{"key":"svc.","value":1}`},
		{"kv.put.request", `{"key":"svc\tapi","value":1}`},
		{"kv.put.request", `{"key":"svc\napi","value":1}`},
		{"kv.put.request", `{"key":"caf\u00e9","value":1}`},
		{"kv.put.request", `{"key":"a\u007f","value":1}`},
		{"kv.put.request", `{"key":"` + strings.Repeat("k", 1025) + `","value":1}`},
		{"kv.put.request", `{"key":7,"value":1}`},
		// kv.get
		{"kv.get.request", `{}`}, // neither key nor prefix
		{"kv.get.request", `{"key":"a","revision":-1}`},
		{"kv.put.request", `{"key":"a","value":1,"metadata":[1]}`},
		{"kv.put.request", `{"key":"a","value":1,"metadata":"x"}`},
		{"kv.put.request", `{"key":"a","value":1,"content_type":"a\tb"}`},
		{"kv.put.request", `{"key":"a","value":1,"content_type":"caf\u00e9"}`},
		{"kv.put.request", `{"key":"a","value":1,"content_type":1}`},
		{"kv.put.request", `{"key":"a","value":1,"content_type":"` + strings.Repeat("x", 257) + `"}`},
		{"kv.txn.request", `{"success":[{"put":{"key":"a","value":1,"metadata":5}}]}`},
		{"kv.get.request", `{"key":"a","range_start":"a"}`},
		{"kv.get.request", `{"prefix":"a","range_start":"a","range_end":"b"}`},
		{"kv.get.request", `{"range_end":"b"}`},
		{"kv.get.request", `{"key":"a","range_end":"b"}`},
		{"kv.get.request", `{"range_start":"a b"}`},
		{"kv.get.request", `{"range_start":"a","range_end":""}`},
		{"kv.get.request", `{"range_start":1}`},
		{"kv.delete.request", `{"key":"a","range_start":"a"}`},
		{"kv.delete.request", `{"range_end":"b"}`},
		{"kv.delete.request", `{"range_start":"\u00e9"}`},
		{"kv.changes.request", `{"range_start":"a","prefix":"a","after_revision":0}`},
		{"kv.changes.request", `{"range_end":"a","after_revision":0}`},
		{"kv.get.request", `{"key":"a","revision":"3"}`},
		{"kv.get.request", `{"key":"a","revision":1.5}`},
		{"kv.history.request", `{}`},
		{"kv.history.request", `{"prefix":"a"}`},
		{"kv.history.request", `{"key":"a.*"}`},
		{"kv.history.request", `{"key":"a","from_revision":-1}`},
		{"kv.history.request", `{"key":"a","limit":1001}`},
		{"kv.history.request", `{"key":"a","limit":-1}`},
		{"kv.history.request", `{"key":"a","after_revision":-3}`},
		{"kv.history.request", `{"key":"a","newest_first":1}`},
		{"kv.compact.request", `{}`},
		{"kv.compact.request", `{"revision":0}`},
		{"kv.compact.request", `{"revision":-5}`},
		{"kv.compact.request", `{"revision":9007199254740992}`},
		{"kv.get.request", `{"key":"a","revision":9007199254740992}`},
		{"kv.history.request", `{"key":"a","to_revision":9007199254740992}`},
		{"kv.compact.request", `{"revision":"9"}`},
		{"kv.compact.request", `{"revision":1,"idempotency_key":"x"}`},
		{"kv.get.request", `{"limit":10}`},              // neither key nor prefix
		{"kv.get.request", `{"key":"a","prefix":"a"}`},  // both
		{"kv.get.request", `{"key":"a","prefix":""}`},   // both
		{"kv.get.request", `{"key":""}`},                // empty key
		{"kv.get.request", `{"key":"a b"}`},             // space
		{"kv.get.request", `{"key":"svc.*"}`},           // wildcard
		{"kv.get.request", `{"prefix":"svc.>"}`},        // wildcard
		{"kv.get.request", `{"prefix":".svc"}`},         // empty first token
		{"kv.get.request", `{"prefix":"svc..a"}`},       // empty token
		{"kv.get.request", `{"prefix":"a b"}`},          // space
		{"kv.get.request", `{"prefix":"a","limit":-1}`}, // negative limit
		{"kv.get.request", `{"prefix":"a","limit":10001}`},
		{"kv.get.request", `{"prefix":"a","limit":"10"}`},
		{"kv.get.request", `{"prefix":"a","keys_only":1}`},
		{"kv.get.request", `{"key":null}`},
		// kv.delete
		{"kv.delete.request", `{}`},
		{"kv.delete.request", `{"prev_kv":true}`},
		{"kv.delete.request", `{"key":"a","prefix":"a"}`},
		{"kv.delete.request", `{"key":"a.>"}`},
		{"kv.delete.request", `{"key":"a","lease":1}`},
		// kv.changes
		{"kv.changes.request", `{"after_revision":0}`},                               // neither key nor prefix
		{"kv.changes.request", `{"key":"a","prefix":"a","after_revision":0}`},        // both
		{"kv.changes.request", `{"key":"a","prefix":"","after_revision":0}`},         // both
		{"kv.changes.request", `{"key":"a"}`},                                        // missing after_revision
		{"kv.changes.request", `{"key":"a","after_revision":-1}`},                    // negative after_revision
		{"kv.changes.request", `{"key":"a","after_revision":1.5}`},                   // fractional after_revision
		{"kv.changes.request", `{"key":"a","after_revision":"3"}`},                   // wrong type
		{"kv.changes.request", `{"key":"a","after_revision":9007199254740992}`},      // beyond 2^53-1
		{"kv.changes.request", `{"key":"a","after_revision":3,"after_op_index":-2}`}, // after_op_index below -1
		{"kv.changes.request", `{"key":"a","after_revision":3,"after_op_index":null}`},
		{"kv.changes.request", `{"key":"a","after_revision":3,"limit":1001}`},
		{"kv.changes.request", `{"key":"a","after_revision":3,"limit":-1}`},
		{"kv.changes.request", `{"key":"","after_revision":0}`},                        // empty key
		{"kv.changes.request", `{"key":"svc.*","after_revision":0}`},                   // wildcard
		{"kv.changes.request", `{"prefix":"svc.>","after_revision":0}`},                // wildcard
		{"kv.changes.request", `{"prefix":".svc","after_revision":0}`},                 // empty first token
		{"kv.changes.request", `{"prefix":"svc.","after_revision":0,"after":"svc.a"}`}, // unknown field
		{"kv.changes.request", `{"prefix":"svc.","after_revision":0,"revision":3}`},    // unknown field
		// kv.put and kv.delete idempotency keys
		{"kv.put.request", `{"key":"a","value":1,"idempotency_key":""}`},
		{"kv.put.request", `{"key":"a","value":1,"idempotency_key":"a\u0001"}`},
		{"kv.put.request", `{"key":"a","value":1,"idempotency_key":"a\tb"}`},
		{"kv.put.request", `{"key":"a","value":1,"idempotency_key":"a\u007f"}`},
		{"kv.put.request", `{"key":"a","value":1,"idempotency_key":"caf\u00e9"}`},
		{"kv.put.request", `{"key":"a","value":1,"idempotency_key":"` + strings.Repeat("k", 257) + `"}`},
		{"kv.put.request", `{"key":"a","value":1,"idempotency_key":7}`},
		{"kv.put.request", `{"key":"a","value":1,"idempotency_key":null}`},
		{"kv.delete.request", `{"key":"a","idempotency_key":""}`},
		{"kv.delete.request", `{"key":"a","idempotency_key":"a\nb"}`},
		{"kv.delete.request", `{"prefix":"a","idempotency_key":"` + strings.Repeat("k", 257) + `"}`},
		// kv.txn request: compares
		{"kv.txn.request", `{"compare":[{"key":"a","target":"lease_id","op":"==","value":1}]}`}, // unknown target
		{"kv.txn.request", `{"compare":[{"key":"a","target":"Version","op":"==","value":1}]}`},  // unknown target
		{"kv.txn.request", `{"compare":[{"key":"a","target":"version","op":"=","value":1}]}`},   // unknown op
		{"kv.txn.request", `{"compare":[{"key":"a","target":"version","op":"<>","value":1}]}`},  // unknown op
		{"kv.txn.request", `{"compare":[{"key":"a","target":"exists","op":"<","value":true}]}`}, // < on exists
		{"kv.txn.request", `{"compare":[{"key":"a","target":"value","op":"<","value":1}]}`},     // < on value
		{"kv.txn.request", `{"compare":[{"key":"a","target":"value","op":">=","value":1}]}`},    // >= on value
		{"kv.txn.request", `{"compare":[{"key":"a","target":"lease","op":"<","value":1}]}`},     // < on lease
		{"kv.txn.request", `{"compare":[{"key":"a","target":"exists","op":"==","value":1}]}`},   // exists with a number
		{"kv.txn.request", `{"compare":[{"key":"a","target":"exists","op":"==","value":"true"}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"exists","op":"==","value":null}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"version","op":"==","value":"3"}]}`}, // version with a string
		{"kv.txn.request", `{"compare":[{"key":"a","target":"version","op":"==","value":1.5}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"create_revision","op":"==","value":null}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"mod_revision","op":">","value":true}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"ttl","op":"<","value":"5s"}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"lease","op":"==","value":-1}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"lease","op":"==","value":9007199254740992}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"lease","op":"==","value":"42"}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"field","op":"==","value":"pending"}]}`},                   // field without path
		{"kv.txn.request", `{"compare":[{"key":"a","target":"version","path":"/status","op":"==","value":1}]}`},        // path on a version compare
		{"kv.txn.request", `{"compare":[{"key":"a","target":"value","path":"","op":"==","value":1}]}`},                 // path on a value compare
		{"kv.txn.request", `{"compare":[{"key":"a","target":"exists","path":"/x","op":"==","value":true}]}`},           // path on an exists compare
		{"kv.txn.request", `{"compare":[{"key":"a","target":"field","path":"status","op":"==","value":"pending"}]}`},   // not a JSON Pointer
		{"kv.txn.request", `{"compare":[{"key":"a","target":"field","path":"/a~2","op":"==","value":"pending"}]}`},     // bad escape
		{"kv.txn.request", `{"compare":[{"key":"a","target":"field","path":"/a~","op":"==","value":"pending"}]}`},      // bad escape
		{"kv.txn.request", `{"compare":[{"key":"a","target":"field","path":["status"],"op":"==","value":"pending"}]}`}, // not a string
		{"kv.txn.request", `{"compare":[{"key":"a","target":"field","path":null,"op":"==","value":"pending"}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"version","op":"=="}]}`}, // missing value
		{"kv.txn.request", `{"compare":[{"target":"version","op":"==","value":1}]}`}, // missing key
		{"kv.txn.request", `{"compare":[{"key":"a","op":"==","value":1}]}`},          // missing target
		{"kv.txn.request", `{"compare":[{"key":"a","target":"version","value":1}]}`}, // missing op
		{"kv.txn.request", `{"compare":[{"key":"a b","target":"version","op":"==","value":1}]}`},
		{"kv.txn.request", `{"compare":[{"key":"svc.>","target":"version","op":"==","value":1}]}`},
		{"kv.txn.request", `{"compare":[{"key":"a","target":"version","op":"==","value":1,"range_end":"b"}]}`}, // unknown field
		{"kv.txn.request", `{"compare":[` + versionCompares(65) + `]}`},                                        // one compare too many
		{"kv.txn.request", `{"compare":{"key":"a","target":"version","op":"==","value":0}}`},
		{"kv.txn.request", `{"compare":null}`},
		// kv.txn request: operations
		{"kv.txn.request", `{"success":[{"put":{"key":"a","value":1},"get":{"key":"a"}}]}`}, // two kinds
		{"kv.txn.request", `{"failure":[{"get":{"key":"a"},"delete":{"key":"a"}}]}`},        // two kinds
		{"kv.txn.request", `{"success":[{}]}`},                                              // no kind
		{"kv.txn.request", `{"success":[{"put":null}]}`},
		{"kv.txn.request", `{"success":[{"range":{"key":"a"}}]}`}, // unknown field
		{"kv.txn.request", `{"success":[` + repeatJSON(`{"get":{"key":"a"}}`, 129) + `]}`},
		{"kv.txn.request", `{"failure":[` + repeatJSON(`{"get":{"key":"a"}}`, 129) + `]}`},
		{"kv.txn.request", `{"success":{"get":{"key":"a"}}}`},
		{"kv.txn.request", `{"success":[{"put":{"key":"a"}}]}`},                                 // put without value
		{"kv.txn.request", `{"success":[{"put":{"key":"a","value":1,"lease":1,"ttl":10}}]}`},    // lease and ttl
		{"kv.txn.request", `{"success":[{"put":{"key":"a","value":1,"ttl":0}}]}`},               // ttl 0
		{"kv.txn.request", `{"success":[{"put":{"key":"a","value":1,"lease":-1}}]}`},            // negative lease
		{"kv.txn.request", `{"success":[{"put":{"key":"a.","value":1}}]}`},                      // bad key
		{"kv.txn.request", `{"success":[{"put":{"key":"a","value":1,"idempotency_key":"x"}}]}`}, // the key belongs to the transaction
		{"kv.txn.request", `{"success":[{"put":{"key":"a","value":1,"version":2}}]}`},           // unknown field
		{"kv.txn.request", `{"success":[{"get":{"key":"a","serializable":true}}]}`},             // serializable
		{"kv.txn.request", `{"success":[{"get":{"prefix":"a","limit":1001}}]}`},                 // limit beyond 1000
		{"kv.txn.request", `{"success":[{"get":{"prefix":"a","limit":-1}}]}`},                   // negative limit
		{"kv.txn.request", `{"success":[{"get":{"key":"a","prefix":"a"}}]}`},                    // both key and prefix
		{"kv.txn.request", `{"success":[{"get":{"limit":10}}]}`},                                // neither
		{"kv.txn.request", `{"success":[{"get":{"key":"a","revision":3}}]}`},                    // unknown field
		{"kv.txn.request", `{"success":[{"delete":{"prefix":"a","limit":1001}}]}`},              // limit beyond 1000
		{"kv.txn.request", `{"success":[{"delete":{"prefix":"a","limit":-1}}]}`},                // negative limit
		{"kv.txn.request", `{"success":[{"delete":{"key":"a","prefix":"a"}}]}`},                 // both key and prefix
		{"kv.txn.request", `{"success":[{"delete":{"prev_kv":true}}]}`},                         // neither
		{"kv.txn.request", `{"success":[{"delete":{"key":"a","idempotency_key":"x"}}]}`},        // the key belongs to the transaction
		{"kv.txn.request", `{"success":[{"delete":{"key":"a","lease":1}}]}`},                    // unknown field
		// kv.txn request: idempotency key and unknown fields
		{"kv.txn.request", `{"idempotency_key":""}`},
		{"kv.txn.request", `{"idempotency_key":"n1:\u0007"}`},
		{"kv.txn.request", `{"idempotency_key":"n1:\r\n"}`},
		{"kv.txn.request", `{"idempotency_key":"n1:\u007f"}`},
		{"kv.txn.request", `{"idempotency_key":"n1:\u00e9"}`},
		{"kv.txn.request", `{"idempotency_key":"` + strings.Repeat("k", 257) + `"}`},
		{"kv.txn.request", `{"idempotency_key":42}`},
		{"kv.txn.request", `{"revision":1}`}, // unknown field
		{"kv.txn.request", `[]`},
	}
}

// js is the JSON encoding of v, which must encode.
func js(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }

// printableASCII is every printable ASCII character, space included: what
// an idempotency key may contain.
var printableASCII = func() string {
	var b strings.Builder
	for c := byte(0x20); c <= 0x7e; c++ {
		b.WriteByte(c)
	}
	return b.String()
}()

// repeatJSON returns n copies of a JSON value separated by commas, for
// arrays at and beyond a limit.
func repeatJSON(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}

// versionCompares returns n version compares of n different keys, for a
// transaction at and beyond the most compares (two compares of one key
// and target are refused by the server).
func versionCompares(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"key":"k%d","target":"version","op":"==","value":0}`, i)
	}
	return b.String()
}

// issueTxnExample is the request of the transactions issue, verbatim.
const issueTxnExample = `{"compare": [ {"key":"locks.build","target":"create_revision","op":"==","value":0},
              {"key":"cfg.api","target":"value","op":"==","value":{"v":3}},
              {"key":"jobs.7.state","target":"field","path":"/status","op":"==","value":"pending"},
              {"key":"locks.build","target":"lease","op":"==","value":42} ],
 "success": [ {"put":{"key":"locks.build","value":"n1","lease":42}},
              {"get":{"key":"cfg.api"}},
              {"delete":{"prefix":"tmp.n1."}} ],
 "failure": [ {"get":{"key":"locks.build"}} ],
 "idempotency_key": "n1:req-1842"}`

// sampleTxnRequest is a transaction request that uses every field of every
// Go type of a request and every compare target.
func sampleTxnRequest() schema.KVTxnRequest {
	return schema.KVTxnRequest{
		Compare: []schema.TxnCompare{
			{Key: "locks.build", Target: schema.TargetExists, Op: "==", Value: json.RawMessage(`false`)},
			{Key: "cfg.api", Target: schema.TargetValue, Op: "!=", Value: json.RawMessage(`{"v":3}`)},
			{Key: "jobs.7.state", Target: schema.TargetField, Path: ptr("/status"), Op: "==", Value: json.RawMessage(`"pending"`)},
			{Key: "cfg.api", Target: schema.TargetVersion, Op: "<", Value: json.RawMessage(`10`)},
			{Key: "cfg.api", Target: schema.TargetCreateRevision, Op: "<=", Value: json.RawMessage(`12`)},
			{Key: "cfg.api", Target: schema.TargetModRevision, Op: ">", Value: json.RawMessage(`1500`)},
			{Key: "svc.api.n1", Target: schema.TargetLease, Op: "==", Value: json.RawMessage(`42`)},
			{Key: "svc.api.n1", Target: schema.TargetTTL, Op: ">=", Value: json.RawMessage(`5`)},
		},
		Success: []schema.TxnOp{
			{Put: &schema.TxnPut{Key: "locks.build", Value: json.RawMessage(`"n1"`), Lease: ptr[int64](42), PrevKV: true}},
			{Put: &schema.TxnPut{Key: "jobs.7.state", Value: json.RawMessage(`{"status":"running"}`), TTL: ptr[int64](30)}},
			{Get: &schema.TxnGet{Prefix: ptr("cfg."), Limit: 1000, After: "cfg.api", KeysOnly: true, CountOnly: true}},
			{Delete: &schema.TxnDelete{Prefix: ptr("tmp.n1."), PrevKV: true, Limit: 1000}},
		},
		Failure: []schema.TxnOp{
			{Get: &schema.TxnGet{Key: ptr("locks.build")}},
			{Delete: &schema.TxnDelete{Key: ptr("tmp.n1.x")}},
		},
		IdempotencyKey: "n1:req-1842",
	}
}
