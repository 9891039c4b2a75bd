package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// testDecoder is the decoder of the default configuration on a connection
// with a 1 MiB max payload.
func testDecoder() *Decoder {
	d := New(defaultLimits(), 1<<20)
	return &d
}

// defaultLimits are the limits of a node's default configuration.
func defaultLimits() Limits {
	return Limits{
		MinTTL: schema.DefaultMinTTL, MaxKeyBytes: subjects.MaxKeyBytes,
		MaxValueBytes: schema.DefaultMaxValueBytes, MaxMetadataBytes: schema.DefaultMaxMetadataBytes,
		MaxTxnCompares: schema.DefaultMaxTxnCompares, MaxTxnOps: schema.DefaultMaxTxnOps, MaxTxnBytes: schema.DefaultMaxTxnBytes,
	}
}

// decodeRequest runs the decoder of ep on body and returns its error.
func decodeRequest(d *Decoder, ep subjects.Endpoint, body []byte) *schema.Error {
	_, e := decodeBody(d, ep, body)
	return e
}

// decodeBody runs the decoder of ep on body and returns the body's
// idempotency key (for the requests that carry one) and its error; an
// endpoint with no decoder of its own is decoded strictly, as cluster.go
// decodes them.
func decodeBody(d *Decoder, ep subjects.Endpoint, body []byte) (key string, e *schema.Error) {
	switch ep {
	case subjects.LeaseGrant:
		_, e = d.Grant(body)
	case subjects.LeaseKeepAlive:
		_, e = d.KeepAlive(body)
	case subjects.LeaseKeepAliveMany:
		_, e = d.KeepAliveMany(body)
	case subjects.LeaseRevoke:
		_, e = d.Revoke(body)
	case subjects.LeaseInfo:
		_, e = d.LeaseInfo(body)
	case subjects.LeaseList:
		_, e = d.LeaseList(body)
	case subjects.KVPut:
		_, key, e = d.Put(body)
	case subjects.KVGet:
		_, e = d.Get(body)
	case subjects.KVHistory:
		_, e = d.History(body)
	case subjects.KVCompact:
		_, e = d.Compact(body)
	case subjects.KVDelete:
		_, key, e = d.Delete(body)
	case subjects.KVTxn:
		_, key, e = d.Txn(body)
	case subjects.KVChanges:
		_, e = d.Changes(body)
	case subjects.ClusterBackupChunk:
		_, e = d.BackupChunk(body)
	case subjects.ClusterJoin:
		_, e = d.Join(body)
	case subjects.ClusterRemove:
		_, e = d.Remove(body)
	default:
		var req schema.ClusterJoinRequest
		e = Strict(body, &req)
	}
	return key, e
}

// goVocabulary matches what a description must not say: Go's type names
// and decoder internals, and byte values where words serve better.
var goVocabulary = regexp.MustCompile(`\b(u?int(8|16|32|64)?|float(32|64)|struct|map\[|interface|unmarshal|Go|JSON string|json:|schema\.|fsm\.|reflect|nil|0x[0-9a-f]+)\b|\[\]|\*string|%!|printable ASCII`)

// quoted matches what a description quotes from the request, which may
// say anything.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)+'`)

// checkUserFacing fails unless desc reads as a sentence for a user of any
// language.
func checkUserFacing(t *testing.T, what, desc string) {
	t.Helper()
	if p := userFacingProblem(desc); p != "" {
		t.Errorf("%s: description %q %s", what, desc, p)
	}
}

// userFacingProblem says what keeps desc from being one line in the user's
// words, or "" when nothing does.
func userFacingProblem(desc string) string {
	switch {
	case desc == "" || strings.TrimSpace(desc) != desc || strings.ContainsAny(desc, "\n\r"):
		return "is empty, padded or more than one line"
	case goVocabulary.MatchString(quoted.ReplaceAllString(desc, `""`)):
		return "says " + strconv.Quote(goVocabulary.FindString(quoted.ReplaceAllString(desc, `""`))) + ", which is Go's vocabulary, not the user's"
	case strings.HasSuffix(desc, ":") || strings.HasPrefix(desc, ":"):
		return "is not a sentence"
	}
	return ""
}

// Every description a request decoder can give, word for word: each is a
// sentence a user of any language can act on, naming the field by its JSON
// path, saying what it must be and what was sent. Error names and codes
// stay what clients test for.
func TestDecodeErrorDescriptions(t *testing.T) {
	d := testDecoder()
	for _, tc := range decodeErrorCases() {
		what := string(tc.ep) + " " + shorten(tc.body)
		e := decodeRequest(d, tc.ep, []byte(tc.body))
		if e == nil {
			t.Errorf("%s: accepted", what)
			continue
		}
		if e.Name != tc.name {
			t.Errorf("%s: error %s, want %s", what, e.Name, tc.name)
		}
		if e.Description != tc.desc {
			t.Errorf("%s:\n got  %s\n want %s", what, e.Description, tc.desc)
		}
		checkUserFacing(t, what, e.Description)
	}
}

// decodeErrorCase is a request a decoder refuses, with the error it gives.
type decodeErrorCase struct {
	ep   subjects.Endpoint
	body string
	name string
	desc string
}

// decodeErrorCases are the requests of TestDecodeErrorDescriptions; the
// schema agreement test judges them by the JSON Schemas too.
func decodeErrorCases() []decodeErrorCase {
	long := strings.Repeat("k", 1025)
	return []decodeErrorCase{
		// The body as a whole.
		{subjects.LeaseGrant, ``, schema.ErrInvalidRequest, `the request body is empty; send a JSON object`},
		{subjects.LeaseGrant, " \n", schema.ErrInvalidRequest, `the request body is empty; send a JSON object`},
		{subjects.LeaseGrant, `[1]`, schema.ErrInvalidRequest, `the request body must be a JSON object, not an array`},
		{subjects.LeaseGrant, `null`, schema.ErrInvalidRequest, `the request body must be a JSON object, not null`},
		{subjects.LeaseGrant, `"ttl"`, schema.ErrInvalidRequest, `the request body must be a JSON object, not a string`},
		{subjects.LeaseGrant, `5`, schema.ErrInvalidRequest, `the request body must be a JSON object, not a number`},
		{subjects.LeaseGrant, `ttl=5`, schema.ErrInvalidRequest, `the request body must be a JSON object, not text that is not JSON`},
		{subjects.LeaseGrant, `{"ttl":5} {"ttl":6}`, schema.ErrInvalidRequest, `the request body must hold one JSON object and nothing after it`},
		{subjects.LeaseGrant, `{"ttl":`, schema.ErrInvalidRequest, `the request body is not valid JSON: it ends before the object is complete`},
		{subjects.LeaseGrant, `  {ttl:5}`, schema.ErrInvalidRequest, `the request body is not valid JSON: invalid character 't' looking for beginning of object key string (at byte 4)`},
		{subjects.KVPut, `{"key":"a","value":tru}`, schema.ErrInvalidRequest, `the request body is not valid JSON: invalid character '}' in literal true (expecting 'e') (at byte 23)`},
		{subjects.LeaseGrant, `{"tll":5}`, schema.ErrInvalidRequest, `unknown field "tll": the fields of the request are ttl, id and metadata`},
		{subjects.KVDelete, `{"key":"a","recursive":true}`, schema.ErrInvalidRequest, `unknown field "recursive": the fields of the request are key, prefix, range_start, range_end, prev_kv and idempotency_key`},
		{subjects.ClusterSnapshot, `{"force":true}`, schema.ErrInvalidRequest, `unknown field "force": the fields of the request are id, address and cluster_id`},

		// Kinds of values, by their JSON path.
		{subjects.LeaseGrant, `{"ttl":"10s"}`, schema.ErrInvalidRequest, `ttl must be a whole number of seconds, not the string "10s"`},
		{subjects.LeaseGrant, `{"ttl":1.5}`, schema.ErrInvalidRequest, `ttl must be a whole number of seconds, not 1.5`},
		{subjects.LeaseGrant, `{"ttl":1e3}`, schema.ErrInvalidRequest, `ttl must be a whole number of seconds written without an exponent, not 1e3`},
		{subjects.LeaseGrant, `{"ttl":99999999999999999999}`, schema.ErrInvalidRequest, `ttl is out of range: 99999999999999999999`},
		{subjects.LeaseGrant, `{"ttl":[10]}`, schema.ErrInvalidRequest, `ttl must be a whole number of seconds, not an array`},
		{subjects.LeaseGrant, `{"ttl":5,"id":"7"}`, schema.ErrInvalidRequest, `id must be a lease id (a whole number), not the string "7"`},
		{subjects.LeaseRevoke, `{"id":true}`, schema.ErrInvalidRequest, `id must be a lease id (a whole number), not true`},
		{subjects.LeaseInfo, `{"id":1,"keys":"yes"}`, schema.ErrInvalidRequest, `keys must be true or false, not the string "yes"`},
		{subjects.LeaseKeepAliveMany, `{"ids":{"a":1}}`, schema.ErrInvalidRequest, `ids must be an array, not an object`},
		{subjects.LeaseKeepAliveMany, `{"ids":[1,2,"3"]}`, schema.ErrInvalidRequest, `ids[2] must be a lease id (a whole number), not the string "3"`},
		{subjects.LeaseList, `{"limit":"ten"}`, schema.ErrInvalidRequest, `limit must be a whole number, not the string "ten"`},
		{subjects.KVPut, `{"key":1,"value":1}`, schema.ErrInvalidRequest, `key must be a string, not 1`},
		{subjects.KVPut, `{"key":"a","value":1,"lease":"1"}`, schema.ErrInvalidRequest, `lease must be a lease id (a whole number), not the string "1"`},
		{subjects.KVGet, `{"prefix":["a"]}`, schema.ErrInvalidRequest, `prefix must be a string, not an array`},
		{subjects.KVChanges, `{"prefix":"a","after_revision":"3"}`, schema.ErrInvalidRequest, `after_revision must be a whole number, not the string "3"`},
		{subjects.KVTxn, `{"compare":{"key":"a"}}`, schema.ErrInvalidRequest, `compare must be an array, not an object`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"version","op":"==","value":1},{"key":2}]}`, schema.ErrInvalidRequest, `compare[1].key must be a string, not 2`},
		{subjects.KVTxn, `{"success":[{"get":{"key":"a"}},{"put":{"key":"b","value":1,"ttl":"5"}}]}`, schema.ErrInvalidRequest, `success[1].put.ttl must be a whole number of seconds, not the string "5"`},
		{subjects.KVTxn, `{"success":[{"put":[]}]}`, schema.ErrInvalidRequest, `success[0].put must be an object, not an array`},
		{subjects.KVTxn, `{"failure":[1]}`, schema.ErrInvalidRequest, `failure[0] must be an object, not 1`},
		{subjects.KVTxn, `{"success":[{"get":{"key":"a","serializable":true}}]}`, schema.ErrInvalidRequest, `unknown field "serializable": the fields of success[0].get are key, prefix, limit, after, keys_only and count_only`},
		{subjects.KVTxn, `{"success":[{"range":{"key":"a"}}]}`, schema.ErrInvalidRequest, `unknown field "range": the fields of success[0] are put, get and delete`},
		// Case is ignored in names, as encoding/json does; the first
		// refused value is the one described.
		{subjects.LeaseGrant, `{"TTL":"x","tll":1}`, schema.ErrInvalidRequest, `ttl must be a whole number of seconds, not the string "x"`},
		{subjects.LeaseGrant, `{"ttl":5,"metadata":{"a":1},"x":` + `"` + strings.Repeat("é", 40) + `"}`, schema.ErrInvalidRequest, `unknown field "x": the fields of the request are ttl, id and metadata`},
		{subjects.KVPut, `{"key":"` + strings.Repeat("k", 70) + `","value":1,"` + strings.Repeat("f", 70) + `":1}`, schema.ErrInvalidRequest, `unknown field "` + strings.Repeat("f", 64) + `...": the fields of the request are key, value, lease, ttl, prev_kv, content_type, metadata and idempotency_key`},

		// Leases.
		{subjects.LeaseGrant, `{}`, schema.ErrInvalidRequest, `ttl is required: the lease's time to live in whole seconds, at least 1 second`},
		{subjects.LeaseGrant, `{"ttl":null}`, schema.ErrInvalidRequest, `ttl is required: the lease's time to live in whole seconds, at least 1 second`},
		{subjects.LeaseGrant, `{"ttl":0}`, schema.ErrInvalidRequest, `ttl must be at least 1 second, not 0`},
		{subjects.LeaseGrant, `{"ttl":-3}`, schema.ErrInvalidRequest, `ttl must be at least 1 second, not -3`},
		{subjects.LeaseGrant, `{"ttl":9223372036854775807}`, schema.ErrInvalidRequest, `ttl must be at most 3153600000 seconds (100 years), not 9223372036854775807`},
		{subjects.LeaseGrant, `{"ttl":5,"id":-1}`, schema.ErrInvalidRequest, `id must be a lease id from 1 to 9007199254740991, not -1`},
		{subjects.LeaseGrant, `{"ttl":5,"id":9007199254740992}`, schema.ErrInvalidRequest, `id must be a lease id from 1 to 9007199254740991, not 9007199254740992`},
		{subjects.LeaseGrant, `{"ttl":5,"metadata":[1]}`, schema.ErrInvalidRequest, `metadata must be a JSON object, not an array`},
		{subjects.LeaseGrant, `{"ttl":5,"metadata":"owner"}`, schema.ErrInvalidRequest, `metadata must be a JSON object, not a string`},
		{subjects.LeaseGrant, `{"ttl":5,"metadata":{"x":"` + strings.Repeat("m", 8200) + `"}}`, schema.ErrTooLarge, `metadata is 8208 bytes, more than the 8192 allowed`},
		{subjects.LeaseKeepAlive, `{}`, schema.ErrInvalidRequest, `id is required: a lease id from 1 to 9007199254740991`},
		{subjects.LeaseKeepAlive, `{"id":-4}`, schema.ErrInvalidRequest, `id must be a lease id from 1 to 9007199254740991, not -4`},
		{subjects.LeaseKeepAlive, `{"id":1,"ttl":0}`, schema.ErrInvalidRequest, `ttl must be at least 1 second, not 0`},
		{subjects.LeaseKeepAliveMany, `{}`, schema.ErrInvalidRequest, `ids is required: a list of 1 to 10000 lease ids`},
		{subjects.LeaseKeepAliveMany, `{"ids":[]}`, schema.ErrInvalidRequest, `ids is required: a list of 1 to 10000 lease ids`},
		{subjects.LeaseKeepAliveMany, `{"ids":[` + strings.TrimSuffix(strings.Repeat("1,", 10001), ",") + `]}`, schema.ErrInvalidRequest, `ids lists 10001 lease ids, more than the 10000 one request may renew`},
		{subjects.LeaseKeepAliveMany, `{"ids":[1,0]}`, schema.ErrInvalidRequest, `ids[1] must be a lease id from 1 to 9007199254740991, not 0`},
		{subjects.LeaseRevoke, `{}`, schema.ErrInvalidRequest, `id is required: a lease id from 1 to 9007199254740991`},
		{subjects.LeaseInfo, `{"id":0}`, schema.ErrInvalidRequest, `id is required: a lease id from 1 to 9007199254740991`},
		{subjects.LeaseList, `{"limit":-1}`, schema.ErrInvalidRequest, `limit must be from 1 to 10000, not -1`},
		{subjects.LeaseList, `{"after":-5}`, schema.ErrInvalidRequest, `after must be a lease id, 0 or more, not -5`},

		// Keys and values.
		{subjects.KVPut, `{"value":1}`, schema.ErrInvalidRequest, `key must not be empty`},
		{subjects.KVPut, `{"key":"a b","value":1}`, schema.ErrInvalidRequest, `key must not contain spaces`},
		{subjects.KVPut, `{"key":"a\tb","value":1}`, schema.ErrInvalidRequest, `key must not contain tabs`},
		{subjects.KVPut, `{"key":"a\nb","value":1}`, schema.ErrInvalidRequest, `key must not contain line breaks`},
		{subjects.KVPut, `{"key":"a\u0001b","value":1}`, schema.ErrInvalidRequest, `key must not contain control characters`},
		{subjects.KVPut, `{"key":"caf\u00e9","value":1}`, schema.ErrInvalidRequest, `key must be ASCII text: letters, digits and punctuation such as . - _ / : ('é' is not ASCII)`},
		{subjects.KVPut, "{\"key\":\"a\xffb\",\"value\":1}", schema.ErrInvalidRequest, "key must be ASCII text: letters, digits and punctuation such as . - _ / : ('\ufffd' is not ASCII)"},
		{subjects.KVPut, `{"key":"a.*","value":1}`, schema.ErrInvalidRequest, `key must not contain '*': it is a NATS wildcard`},
		{subjects.KVPut, `{"key":"a.>","value":1}`, schema.ErrInvalidRequest, `key must not contain '>': it is a NATS wildcard`},
		{subjects.KVPut, `{"key":".a","value":1}`, schema.ErrInvalidRequest, `key must not start with '.' (keys are '.'-separated words, and no word may be empty)`},
		{subjects.KVPut, `{"key":"a.","value":1}`, schema.ErrInvalidRequest, `key must not end with '.' (keys are '.'-separated words, and no word may be empty)`},
		{subjects.KVPut, `{"key":"a..b","value":1}`, schema.ErrInvalidRequest, `key must not contain '..' (keys are '.'-separated words, and no word may be empty)`},
		{subjects.KVPut, `{"key":"` + long + `","value":1}`, schema.ErrInvalidRequest, `key is 1025 bytes long, more than the 1024 allowed`},
		{subjects.KVPut, `{"key":"a"}`, schema.ErrInvalidRequest, `value is required: any JSON value, null included`},
		{subjects.KVPut, `{"key":"a","value":"` + strings.Repeat("v", 1<<20) + `"}`, schema.ErrTooLarge, `value is 1048578 bytes, more than the 1048576 allowed`},
		{subjects.KVPut, `{"key":"a","value":1,"lease":1,"ttl":5}`, schema.ErrInvalidRequest, `lease and ttl cannot both be given: give one or the other`},
		{subjects.KVPut, `{"key":"a","value":1,"lease":-2}`, schema.ErrInvalidRequest, `lease must be a lease id from 1 to 9007199254740991 (or 0 for none), not -2`},
		{subjects.KVPut, `{"key":"a","value":1,"ttl":0}`, schema.ErrInvalidRequest, `ttl must be at least 1 second, not 0`},
		{subjects.KVGet, `{}`, schema.ErrInvalidRequest, `key or prefix is required (prefix "" means every key)`},
		{subjects.KVGet, `{"key":"a","prefix":"a"}`, schema.ErrInvalidRequest, `key and prefix cannot both be given: give one of them`},
		{subjects.KVGet, `{"prefix":"a b"}`, schema.ErrInvalidRequest, `prefix must not contain spaces`},
		{subjects.KVGet, `{"prefix":".a"}`, schema.ErrInvalidRequest, `prefix must not start with '.' (keys are '.'-separated words, and no word may be empty)`},
		{subjects.KVGet, `{"prefix":"` + long + `"}`, schema.ErrInvalidRequest, `prefix is 1025 bytes long, more than the 1024 allowed`},
		{subjects.KVGet, `{"key":"a","after":"a"}`, schema.ErrInvalidRequest, `after applies only to a read by prefix, not by key`},
		{subjects.KVGet, `{"prefix":"","limit":10001}`, schema.ErrInvalidRequest, `limit must be from 1 to 10000, not 10001`},
		{subjects.KVDelete, `{"key":"a.>"}`, schema.ErrInvalidRequest, `key must not contain '>': it is a NATS wildcard`},
		{subjects.KVChanges, `{"after_revision":0}`, schema.ErrInvalidRequest, `key or prefix is required (prefix "" means every key)`},
		{subjects.KVChanges, `{"prefix":"","after_revision":-1}`, schema.ErrInvalidRequest, `after_revision must be 0 or more, not -1`},
		{subjects.KVChanges, `{"prefix":"","after_revision":0,"after_op_index":-2}`, schema.ErrInvalidRequest, `after_op_index must be -1 or more, not -2`},
		{subjects.KVChanges, `{"prefix":"","after_revision":0,"limit":1001}`, schema.ErrInvalidRequest, `limit must be from 1 to 1000, not 1001`},

		// Transactions.
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"size","op":"==","value":1}]}`, schema.ErrInvalidRequest, `compare[0].target must be one of exists, value, field, version, create_revision, mod_revision, lease and ttl, not "size"`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"version","op":"=~","value":1}]}`, schema.ErrInvalidRequest, `compare[0].op must be one of ==, !=, <, <=, > and >=, not "=~"`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"exists","op":"<","value":true}]}`, schema.ErrInvalidRequest, `compare[0].op must be == or != in an exists compare, not <`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"lease","op":">=","value":1}]}`, schema.ErrInvalidRequest, `compare[0].op must be == or != in a lease compare, not >=`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"exists","op":"==","value":1}]}`, schema.ErrInvalidRequest, `compare[0].value must be true or false in an exists compare, not 1`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"version","op":"==","value":"1"}]}`, schema.ErrInvalidRequest, `compare[0].value must be a whole number in a version compare, not "1"`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"mod_revision","op":"<","value":1.5}]}`, schema.ErrInvalidRequest, `compare[0].value must be a whole number in a mod_revision compare, not 1.5`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"lease","op":"==","value":-1}]}`, schema.ErrInvalidRequest, `compare[0].value must be a lease id from 1 to 9007199254740991 (or 0 for none), not -1`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"version","op":"=="}]}`, schema.ErrInvalidRequest, `compare[0].value is required: what the version is compared with`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"field","op":"==","value":1}]}`, schema.ErrInvalidRequest, `compare[0].path is required in a field compare: a JSON Pointer such as "/status"`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"field","path":"status","op":"==","value":1}]}`, schema.ErrInvalidRequest, `compare[0].path must be a JSON Pointer (RFC 6901) such as "/status" or "", not "status"`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"version","path":"/x","op":"==","value":1}]}`, schema.ErrInvalidRequest, `compare[0].path applies only to a field compare, not to a version compare`},
		{subjects.KVTxn, `{"compare":[{"key":"a.*","target":"version","op":"==","value":1}]}`, schema.ErrInvalidRequest, `compare[0].key must not contain '*': it is a NATS wildcard`},
		{subjects.KVTxn, `{"compare":[{"key":"a","target":"version","op":">","value":1},{"key":"a","target":"version","op":"<","value":5}]}`, schema.ErrInvalidRequest, `compare[1] is a second version compare of key "a": combine them into one`},
		{subjects.KVTxn, `{"compare":[` + strings.TrimSuffix(strings.Repeat(`{"key":"a","target":"exists","op":"==","value":true},`, 65), ",") + `]}`, schema.ErrInvalidRequest, `compare has 65 compares, more than the 64 allowed`},
		{subjects.KVTxn, `{"success":[` + strings.TrimSuffix(strings.Repeat(`{"get":{"key":"a"}},`, 129), ",") + `]}`, schema.ErrInvalidRequest, `success has 129 operations, more than the 128 allowed`},
		{subjects.KVTxn, `{"success":[{"put":{"key":"a","value":1},"get":{"key":"a"}}]}`, schema.ErrInvalidRequest, `success[0] must hold exactly one of put, get and delete`},
		{subjects.KVTxn, `{"failure":[{}]}`, schema.ErrInvalidRequest, `failure[0] must hold exactly one of put, get and delete`},
		{subjects.KVTxn, `{"success":[{"put":{"key":"a","value":1,"lease":1,"ttl":5}}]}`, schema.ErrInvalidRequest, `success[0].put.lease and success[0].put.ttl cannot both be given: give one or the other`},
		{subjects.KVTxn, `{"success":[{"put":{"key":"a"}}]}`, schema.ErrInvalidRequest, `success[0].put.value is required: any JSON value, null included`},
		{subjects.KVTxn, `{"success":[{"get":{"prefix":"a","limit":1001}}]}`, schema.ErrInvalidRequest, `success[0].get.limit must be from 1 to 1000, not 1001`},
		{subjects.KVTxn, `{"success":[{"get":{"key":"a","prefix":"a"}}]}`, schema.ErrInvalidRequest, `success[0].get.key and success[0].get.prefix cannot both be given: give one of them`},
		{subjects.KVTxn, `{"failure":[{"delete":{}}]}`, schema.ErrInvalidRequest, `failure[0].delete.key or failure[0].delete.prefix is required (prefix "" means every key)`},
		{subjects.KVTxn, `{"success":[{"delete":{"prefix":"a","limit":1001}}]}`, schema.ErrInvalidRequest, `success[0].delete.limit must be from 1 to 1000, not 1001`},
		{subjects.KVTxn, `{"success":[{"put":{"key":"a","value":"` + strings.Repeat("v", 1<<20) + `"}}],"failure":[]}`, schema.ErrTooLarge, `the transaction is 1048633 bytes, more than the 1048576 allowed`},

		// Backup chunks.
		{subjects.ClusterBackupChunk, `{"id":"x"}`, schema.ErrInvalidRequest, `id must be a backup id of 16 lowercase hexadecimal digits, as cluster.backup returned it, not "x"`},
		{subjects.ClusterBackupChunk, `{"id":"5d41402abc4b2a76","offset":-1}`, schema.ErrInvalidRequest, `offset must be 0 or more, not -1`},
		{subjects.ClusterBackupChunk, `{"id":"5d41402abc4b2a76","length":-1}`, schema.ErrInvalidRequest, `length must be 0 or more, not -1`},
	}
}

// A compare's value over the value size limit (which only a transaction
// size limit above the value size limit lets through).
func TestDecodeCompareValueTooLarge(t *testing.T) {
	limits := defaultLimits()
	limits.MaxValueBytes = 8
	d := New(limits, 1<<20)
	e := decodeRequest(&d, subjects.KVTxn, []byte(`{"compare":[{"key":"a","target":"value","op":"==","value":"0123456789"}]}`))
	if want := `compare[0].value is 12 bytes, more than the 8 allowed`; e == nil || e.Name != schema.ErrTooLarge || e.Description != want {
		t.Fatalf("got %v, want too_large %q", e, want)
	}
}

// The idempotency key's descriptions name where it came from: the body's
// idempotency_key or the header.
func TestIdempotencyKeyDescriptions(t *testing.T) {
	withHeader := func(v string) *nats.Msg {
		m := nats.NewMsg("x")
		m.Header.Set(schema.HeaderIdempotencyKey, v)
		return m
	}
	cases := []struct {
		m       *nats.Msg
		bodyKey string
		desc    string
	}{
		{nats.NewMsg("x"), "a\x01b", `idempotency_key must be ASCII text: letters, digits, punctuation and spaces, without control characters`},
		{nats.NewMsg("x"), strings.Repeat("i", 257), `idempotency_key is 257 bytes long, more than the 256 allowed`},
		{withHeader("caf\u00e9"), "", `the Concord-Idempotency-Key header must be ASCII text: letters, digits, punctuation and spaces, without control characters`},
		{withHeader(strings.Repeat("h", 300)), "", `the Concord-Idempotency-Key header is 300 bytes long, more than the 256 allowed`},
		{withHeader("k1"), "k2", `idempotency_key "k2" and the Concord-Idempotency-Key header "k1" differ: give one of them, or the same key in both`},
	}
	for _, tc := range cases {
		_, e := IdempotencyKey(tc.m, tc.bodyKey)
		if e == nil || e.Name != schema.ErrInvalidRequest || e.Description != tc.desc {
			t.Errorf("key %q, header %q: %v, want invalid_request %q", shorten(tc.bodyKey), shorten(tc.m.Header.Get(schema.HeaderIdempotencyKey)), e, tc.desc)
			continue
		}
		checkUserFacing(t, "idempotency key", e.Description)
	}
	if k, e := IdempotencyKey(withHeader("same key"), "same key"); e != nil || k != "same key" {
		t.Errorf("the same key in the body and the header: %q, %v", k, e)
	}
}

// The checker itself refuses what the old descriptions said.
func TestCheckUserFacingRefusesGoVocabulary(t *testing.T) {
	for _, desc := range []string{
		`field "ttl": expected int64, got JSON string`,
		`json: cannot unmarshal string into Go struct field KVPutRequest.ttl of type int64`,
		`key: invalid key: byte 1 (0x20) is not printable ASCII`,
		`ids must be []int64`,
		`value: missing:`,
	} {
		if userFacingProblem(desc) == "" {
			t.Errorf("%q passes as user-facing", desc)
		}
	}
}

// The walk that finds what encoding/json refused covers every kind it can
// meet, and so agrees with encoding/json on kinds the requests do not use
// today.
func TestFindRefusedValueKinds(t *testing.T) {
	type inner struct {
		N uint8 `json:"n"`
	}
	type all struct {
		U   uint64             `json:"u"`
		F   float32            `json:"f"`
		M   map[string]int     `json:"m"`
		A   [2]bool            `json:"a"`
		P   **inner            `json:"p"`
		Any any                `json:"any"`
		Raw json.RawMessage    `json:"raw"`
		Ptr map[string]*inner  `json:"ptr"`
		Ign string             `json:"-"`
		Own int                // no tag: its Go name is its JSON name
		S   []map[string]inner `json:"s,omitempty"`
	}
	cases := []struct{ body, desc string }{
		{`{"u":-1}`, `u must be a whole number, 0 or more, not -1`},
		{`{"u":18446744073709551616}`, `u is out of range: 18446744073709551616`},
		{`{"f":"1"}`, `f must be a number, not the string "1"`},
		{`{"f":1e39}`, `f is out of range: 1e39`},
		{`{"m":{"a":1,"b":true}}`, `m.b must be a whole number, not true`},
		{`{"m":[1]}`, `m must be an object, not an array`},
		{`{"a":[true,1]}`, `a[1] must be true or false, not 1`},
		{`{"p":{"n":256}}`, `p.n is out of range: 256`},
		{`{"p":{"x":1}}`, `unknown field "x": the fields of p are n`},
		{`{"any":{"x":[1,{"y":2}]},"raw":[{"z":[]}],"u":"x"}`, `u must be a whole number, 0 or more, not the string "x"`},
		{`{"ptr":{"k":null,"l":{"n":"1"}}}`, `ptr.l.n must be a whole number, 0 or more, not the string "1"`},
		{`{"Ign":1}`, `unknown field "Ign": the fields of the request are u, f, m, a, p, any, raw, ptr, Own and s`},
		{`{"own":"x"}`, `Own must be a whole number, not the string "x"`},
		{`{"s":[{"k":{"n":-1}}]}`, `s[0].k.n must be a whole number, 0 or more, not -1`},
		{`{"u":null,"f":null,"m":null,"s":[null,{"k":null}],"a":false}`, `a must be an array, not false`},
	}
	for _, tc := range cases {
		var v all
		err := strictUnmarshal([]byte(tc.body), &v)
		if err == nil {
			t.Errorf("%s: encoding/json accepts it", tc.body)
			continue
		}
		e := findRefusedValue([]byte(tc.body), reflect.TypeOf(&v))
		if e == nil || e.Description != tc.desc {
			t.Errorf("%s (encoding/json: %v):\n got  %v\n want %s", tc.body, err, e, tc.desc)
		}
	}
	// What encoding/json takes, the walk takes too.
	for _, body := range []string{`{"u":0,"f":1.5e3,"m":{},"a":[true],"p":{"n":255},"any":1,"raw":null,"OWN":-1,"s":[]}`, `{}`, `{"p":null,"raw":{"a":[1,2,{"b":null}]}}`} {
		var v all
		if err := strictUnmarshal([]byte(body), &v); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if e := findRefusedValue([]byte(body), reflect.TypeOf(&v)); e != nil {
			t.Errorf("%s: the walk refuses what encoding/json takes: %v", body, e)
		}
	}
}

// When the walk finds nothing to blame (it should always find what
// encoding/json refused), the description still uses no Go vocabulary.
func TestDescribeJSONErrorFallbacks(t *testing.T) {
	type req struct {
		A int `json:"a"`
	}
	data := []byte(`{"a":1}`) // nothing wrong with it: the walk finds nothing
	cases := []struct {
		err  error
		desc string
	}{
		{&json.UnmarshalTypeError{Value: "string", Type: reflect.TypeFor[int64](), Field: "a"}, `a must be a whole number`},
		{errors.New(`json: unknown field "b"`), `unknown field "b"`},
		{errors.New(`json: something else`), `the request body could not be read: something else`},
	}
	for _, tc := range cases {
		e := describeJSONError(data, 0, &req{}, tc.err)
		if e == nil || e.Name != schema.ErrInvalidRequest || e.Description != tc.desc {
			t.Errorf("%v: got %v, want %q", tc.err, e, tc.desc)
		}
	}
}

// strictUnmarshal decodes as Strict does.
func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
