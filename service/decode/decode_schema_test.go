package decode

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/schema/schematest"
	"github.com/concord-io/concord/subjects"
)

// verdictExample is a request body from one of the example sets, with
// where it came from.
type verdictExample struct {
	from string
	ep   subjects.Endpoint
	body string
}

// acceptedBeforeRaft runs what the server checks before a request reaches
// Raft: the endpoint's decoder and, for the requests that carry one, the
// body's idempotency key. It returns nil when the request would be
// proposed (or read).
func acceptedBeforeRaft(d *Decoder, ep subjects.Endpoint, body []byte) *schema.Error {
	key, e := decodeBody(d, ep, body)
	if e != nil {
		return e
	}
	_, e = IdempotencyKey(nats.NewMsg("x"), key)
	return e
}

// decodedEndpoints are the endpoints whose requests the decoder checks,
// by the name of their request schema.
var decodedEndpoints = map[string]subjects.Endpoint{
	"lease.grant.request":          subjects.LeaseGrant,
	"lease.keepalive.request":      subjects.LeaseKeepAlive,
	"lease.keepalive_many.request": subjects.LeaseKeepAliveMany,
	"lease.revoke.request":         subjects.LeaseRevoke,
	"lease.info.request":           subjects.LeaseInfo,
	"lease.list.request":           subjects.LeaseList,
	"kv.put.request":               subjects.KVPut,
	"kv.get.request":               subjects.KVGet,
	"kv.delete.request":            subjects.KVDelete,
	"kv.txn.request":               subjects.KVTxn,
	"kv.changes.request":           subjects.KVChanges,
	"kv.history.request":           subjects.KVHistory,
	"kv.compact.request":           subjects.KVCompact,
}

// schemaName is the request schema of ep.
func schemaName(ep subjects.Endpoint) string { return string(ep) + ".request" }

// readmeRequest matches a request of the README's console examples.
var readmeRequest = regexp.MustCompile(`^\$ nats req concord\.([a-z_.]+) '(.*)'$`)

// verdictExamples gathers every request example there is: the shared
// valid and invalid examples of the schema tests, the examples inside the
// JSON Schemas, the requests of TestDecodeErrorDescriptions, the README's
// console examples, and a few probes.
func verdictExamples(t *testing.T) []verdictExample {
	t.Helper()
	var out []verdictExample
	add := func(from, msg, body string) {
		ep, ok := decodedEndpoints[msg]
		if !ok {
			t.Fatalf("%s: %s is not a request the decoder checks", from, msg)
		}
		out = append(out, verdictExample{from, ep, body})
	}
	for i, ex := range schematest.ValidRequests() {
		add(fmt.Sprintf("schematest valid #%d", i), ex.Message, ex.Body)
	}
	for i, ex := range schematest.InvalidRequests() {
		add(fmt.Sprintf("schematest invalid #%d", i), ex.Message, ex.Body)
	}
	for msg := range decodedEndpoints {
		raw, _ := schema.Raw(msg)
		var doc struct{ Examples []json.RawMessage }
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		for i, ex := range doc.Examples {
			add(fmt.Sprintf("%s.json example #%d", msg, i), msg, string(ex))
		}
	}
	for i, c := range decodeErrorCases() {
		if _, ok := decodedEndpoints[schemaName(c.ep)]; ok {
			add(fmt.Sprintf("TestDecodeErrorDescriptions #%d", i), schemaName(c.ep), c.body)
		}
	}
	// Probes of what the decoder reads more leniently than the schemas.
	add("probe", "lease.grant.request", `{"TTL":10}`)
	add("probe", "lease.grant.request", `{"ttl":10.0}`)
	add("probe", "kv.put.request", `{"key":"a","Value":1}`)
	// The requests the README and the pages of docs/ show.
	docs, _ := filepath.Glob("../../docs/*.md")
	readme := 0
	for _, path := range append([]string{"../../README.md"}, docs...) {
		readme += addDocRequests(t, path, func(from, ep, body string) bool {
			if _, ok := decodedEndpoints[ep]; !ok {
				return false
			}
			add(from, ep, body)
			return true
		})
	}
	if readme == 0 {
		t.Fatal("no request found in the examples of the README and docs/")
	}
	return out
}

// TestSchemaAndDecoderAgree feeds every request example through the JSON
// Schema and through the server's checks before Raft (with the default
// limits) and demands the same verdict, except where verdictException
// names the reason they differ.
func TestSchemaAndDecoderAgree(t *testing.T) {
	d := testDecoder()
	examples := verdictExamples(t)
	used := map[string]bool{}
	sources := map[string]int{}
	for _, ex := range examples {
		sources[strings.FieldsFunc(ex.from, func(r rune) bool { return r == ' ' || r == ':' })[0]]++
		schemaErr := schema.Validate(schemaName(ex.ep), []byte(ex.body))
		decodeErr := acceptedBeforeRaft(d, ex.ep, []byte(ex.body))
		what := fmt.Sprintf("%s: %s %s", ex.from, ex.ep, shorten(ex.body))
		if (schemaErr == nil) == (decodeErr == nil) {
			if _, listed := verdictExceptions[schemaName(ex.ep)+" "+ex.body]; listed {
				t.Errorf("%s: listed as an exception, but the schema and the decoder agree", what)
			}
			continue
		}
		if reason := verdictException(ex, schemaErr, decodeErr); reason != "" {
			used[schemaName(ex.ep)+" "+ex.body] = true
			continue
		}
		if schemaErr == nil {
			t.Errorf("%s: the schema accepts it, the decoder refuses it: %v", what, decodeErr)
		} else {
			t.Errorf("%s: the decoder accepts it, the schema refuses it: %v", what, schemaErr)
		}
	}
	for key := range verdictExceptions {
		if !used[key] {
			t.Errorf("exception %s: no example has this body, or the two agree on it now", shorten(key))
		}
	}
	for _, src := range []string{"schematest", "lease.grant.request.json", "kv.txn.request.json", "TestDecodeErrorDescriptions", "README.md", "api.md", "probe"} {
		if sources[src] == 0 {
			t.Errorf("no example from %s", src)
		}
	}
}

// verdictException returns why the schema and the decoder may disagree on
// ex, or "" when they must not.
func verdictException(ex verdictExample, schemaErr error, decodeErr *schema.Error) string {
	if schemaErr == nil && decodeErr.Name == schema.ErrTooLarge {
		// The schemas say so in words (defs.json value and metadata,
		// kv.txn.request): a JSON Schema cannot bound the encoded size of
		// a JSON value or of the whole body.
		return "sizes of compact JSON are checked by the server only"
	}
	return verdictExceptions[schemaName(ex.ep)+" "+ex.body]
}

// verdictExceptions are the bodies on which the schema and the decoder
// disagree, keyed by "<schema name> <body>", each with its reason. The
// decoder accepts a null optional field, a member name in another case, an
// empty idempotency key, a missing after_revision and an after_revision
// beyond 2^53-1, which the schemas refuse: refusing them in the decoder
// would change replies, so the schemas, which state the contract, stay
// stricter than the server.
var verdictExceptions = map[string]string{
	// The schema cannot state these rules.
	`lease.grant.request {"ttl":1e3}`:  "a schema's integer is a value, 1e3 is 1000; the decoder wants the digits of a whole number",
	`lease.grant.request {"ttl":10.0}`: "a schema's integer is a value, 10.0 is 10; the decoder wants the digits of a whole number",
	`kv.txn.request {"compare":[{"key":"a","target":"version","op":">","value":1},{"key":"a","target":"version","op":"<","value":5}]}`: "two compares of one key and target: a schema cannot make items unique by some of their members (txn_compare says it in words)",
	`kv.get.request {"range_start":"svc/","range_end":"svc."}`:                                                                         "range_end must sort after range_start: a schema cannot compare two members",
	// The schema could state this rule but does not.
	`kv.get.request {"key":"a","after":"a"}`: "after with key, not prefix: the schema leaves the rule to its description",
	// The decoder is more lenient than the schema.
	`lease.grant.request {"ttl":10,"metadata":null}`:                          "encoding/json reads null as absent",
	`kv.changes.request {"key":"a","after_revision":3,"after_op_index":null}`: "encoding/json reads null as absent",
	`kv.put.request {"key":"a","value":1,"idempotency_key":null}`:             "encoding/json reads null as absent",
	`kv.txn.request {"compare":null}`:                                         "encoding/json reads null as absent",
	`kv.put.request {"key":"a","value":1,"idempotency_key":""}`:               "the decoder reads an empty idempotency key as none",
	`kv.delete.request {"key":"a","idempotency_key":""}`:                      "the decoder reads an empty idempotency key as none",
	`kv.txn.request {"idempotency_key":""}`:                                   "the decoder reads an empty idempotency key as none",
	`lease.grant.request {"TTL":10}`:                                          "encoding/json matches member names ignoring case",
	`kv.put.request {"key":"a","Value":1}`:                                    "encoding/json matches member names ignoring case",
	`kv.changes.request {"key":"a"}`:                                          "the decoder reads a missing after_revision as 0",
	`kv.changes.request {"key":"a","after_revision":9007199254740992}`:        "the decoder bounds after_revision by int64, not by 2^53-1",
}

// addDocRequests calls add with each request example of the Markdown page
// at path, named "<page>:<line>", and returns how many add took.
func addDocRequests(t *testing.T, path string, add func(from, ep, body string) bool) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for line := 1; sc.Scan(); line++ {
		if m := readmeRequest.FindStringSubmatch(sc.Text()); m != nil {
			if add(fmt.Sprintf("%s:%d", filepath.Base(path), line), m[1]+".request", m[2]) {
				n++
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}
