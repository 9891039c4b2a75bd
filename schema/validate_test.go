package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/concord-io/concord/subjects"
	"github.com/hashicorp/raft"
)

// wantNames is the wire contract's list of messages; a schema file more or
// less is a change of the contract.
var wantNames = []string{
	"cluster.backup.chunk.reply",
	"cluster.backup.chunk.request",
	"cluster.backup.reply",
	"cluster.backup.request",
	"cluster.join.reply",
	"cluster.join.request",
	"cluster.node.info.reply",
	"cluster.node.info.request",
	"cluster.quota.reply",
	"cluster.quota.request",
	"cluster.remove.reply",
	"cluster.remove.request",
	"cluster.snapshot.reply",
	"cluster.snapshot.request",
	"cluster.status.reply",
	"cluster.status.request",
	"cluster.tenant.export.reply",
	"cluster.tenant.export.request",
	"cluster.tenant.move.reply",
	"cluster.tenant.move.request",
	"cluster.tenants.reply",
	"cluster.tenants.request",
	"error",
	"event",
	"kv.changes.reply",
	"kv.changes.request",
	"kv.compact.reply",
	"kv.compact.request",
	"kv.delete.reply",
	"kv.delete.request",
	"kv.get.reply",
	"kv.get.request",
	"kv.history.reply",
	"kv.history.request",
	"kv.put.reply",
	"kv.put.request",
	"kv.txn.reply",
	"kv.txn.request",
	"lease.grant.reply",
	"lease.grant.request",
	"lease.info.reply",
	"lease.info.request",
	"lease.keepalive.reply",
	"lease.keepalive.request",
	"lease.keepalive_many.reply",
	"lease.keepalive_many.request",
	"lease.list.reply",
	"lease.list.request",
	"lease.revoke.reply",
	"lease.revoke.request",
}

// goTypes maps each message to the Go type that carries it.
var goTypes = map[string]any{
	"cluster.backup.chunk.reply":    ClusterBackupChunkReply{},
	"cluster.backup.chunk.request":  ClusterBackupChunkRequest{},
	"cluster.backup.reply":          ClusterBackupReply{},
	"cluster.backup.request":        ClusterBackupRequest{},
	"cluster.join.reply":            ClusterJoinReply{},
	"cluster.join.request":          ClusterJoinRequest{},
	"cluster.node.info.reply":       NodeInfo{},
	"cluster.node.info.request":     NodeInfoRequest{},
	"cluster.remove.reply":          ClusterRemoveReply{},
	"cluster.remove.request":        ClusterRemoveRequest{},
	"cluster.snapshot.reply":        ClusterSnapshotReply{},
	"cluster.snapshot.request":      ClusterSnapshotRequest{},
	"cluster.tenants.request":       ClusterTenantsRequest{},
	"cluster.tenants.reply":         ClusterTenantsReply{},
	"cluster.quota.request":         ClusterQuotaRequest{},
	"cluster.quota.reply":           ClusterQuotaReply{},
	"cluster.tenant.move.request":   ClusterTenantMoveRequest{},
	"cluster.tenant.move.reply":     ClusterTenantMoveReply{},
	"cluster.tenant.export.request": ClusterTenantExportRequest{},
	"cluster.tenant.export.reply":   ClusterTenantExportReply{},
	"cluster.status.reply":          ClusterStatusReply{},
	"cluster.status.request":        ClusterStatusRequest{},
	"error":                         ErrorReply{},
	"event":                         Event{},
	"kv.history.request":            KVHistoryRequest{},
	"kv.history.reply":              KVHistoryReply{},
	"kv.compact.request":            KVCompactRequest{},
	"kv.compact.reply":              KVCompactReply{},
	"kv.changes.reply":              KVChangesReply{},
	"kv.changes.request":            KVChangesRequest{},
	"kv.delete.reply":               KVDeleteReply{},
	"kv.delete.request":             KVDeleteRequest{},
	"kv.get.reply":                  KVGetReply{},
	"kv.get.request":                KVGetRequest{},
	"kv.put.reply":                  KVPutReply{},
	"kv.put.request":                KVPutRequest{},
	"kv.txn.reply":                  KVTxnReply{},
	"kv.txn.request":                KVTxnRequest{},
	"lease.grant.reply":             LeaseGrantReply{},
	"lease.grant.request":           LeaseGrantRequest{},
	"lease.info.reply":              LeaseInfo{},
	"lease.info.request":            LeaseInfoRequest{},
	"lease.keepalive.reply":         LeaseKeepAliveReply{},
	"lease.keepalive.request":       LeaseKeepAliveRequest{},
	"lease.keepalive_many.reply":    LeaseKeepAliveManyReply{},
	"lease.keepalive_many.request":  LeaseKeepAliveManyRequest{},
	"lease.list.reply":              LeaseListReply{},
	"lease.list.request":            LeaseListRequest{},
	"lease.revoke.reply":            LeaseRevokeReply{},
	"lease.revoke.request":          LeaseRevokeRequest{},
}

func ptr[T any](v T) *T { return &v }

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	return b
}

func rawDoc(t *testing.T, name string) map[string]any {
	t.Helper()
	b, ok := Raw(name)
	if !ok {
		t.Fatalf("Raw(%q): not found", name)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	return doc
}

func TestNames(t *testing.T) {
	got := Names()
	if !slices.Equal(got, wantNames) {
		t.Fatalf("Names() = %q, want %q", got, wantNames)
	}
	if !sort.StringsAreSorted(got) {
		t.Errorf("Names() is not sorted: %q", got)
	}
	got[0] = "changed"
	if Names()[0] != wantNames[0] {
		t.Error("Names() returned its internal slice")
	}
	if len(goTypes) != len(wantNames) {
		t.Errorf("goTypes has %d entries, want %d", len(goTypes), len(wantNames))
	}
}

func TestSchemaID(t *testing.T) {
	if got, want := SchemaID("kv.put.request"), "https://concord.dev/schema/kv.put.request.json"; got != want {
		t.Errorf("SchemaID = %q, want %q", got, want)
	}
}

func TestRaw(t *testing.T) {
	for _, name := range append([]string{"defs"}, wantNames...) {
		doc := rawDoc(t, name)
		if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema = %v", name, doc["$schema"])
		}
		if doc["$id"] != SchemaID(name) {
			t.Errorf("%s: $id = %v, want %s", name, doc["$id"], SchemaID(name))
		}
		for _, k := range []string{"title", "description"} {
			if s, _ := doc[k].(string); s == "" {
				t.Errorf("%s: no %s", name, k)
			}
		}
	}
	for _, name := range []string{"", "nope", "json/event", "../schema/event", "event.json"} {
		if _, ok := Raw(name); ok {
			t.Errorf("Raw(%q) found a document", name)
		}
	}
	b, _ := Raw("event")
	b[0] = 'X'
	if b2, _ := Raw("event"); b2[0] != '{' {
		t.Error("Raw returned shared bytes")
	}
}

func TestSchemasCompile(t *testing.T) {
	schemas, err := compileAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range wantNames {
		if schemas[name] == nil {
			t.Errorf("schema %s not compiled", name)
		}
	}
	if len(schemas) != len(wantNames) {
		t.Errorf("compiled %d schemas, want %d", len(schemas), len(wantNames))
	}
}

func TestValidateUnknownAndMalformed(t *testing.T) {
	if err := Validate("nope", []byte(`{}`)); !errors.Is(err, ErrUnknownSchema) {
		t.Errorf("unknown name: err = %v, want ErrUnknownSchema", err)
	}
	if err := Validate("defs", []byte(`{}`)); !errors.Is(err, ErrUnknownSchema) {
		t.Errorf("defs is not a message: err = %v, want ErrUnknownSchema", err)
	}
	for _, data := range []string{``, `{`, `{"id":1}{"id":2}`, `{"id":1} x`, `nul`} {
		if err := Validate("lease.revoke.request", []byte(data)); err == nil {
			t.Errorf("malformed JSON %q accepted", data)
		}
	}
	if err := Validate("lease.revoke.request", []byte(" {\"id\":1}\n")); err != nil {
		t.Errorf("surrounding white space rejected: %v", err)
	}
}

// walk calls fn for every object in a JSON document, with its JSON pointer.
func walk(ptr string, v any, fn func(ptr string, obj map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		fn(ptr, v)
		for k, c := range v {
			walk(ptr+"/"+k, c, fn)
		}
	case []any:
		for i, c := range v {
			walk(fmt.Sprintf("%s/%d", ptr, i), c, fn)
		}
	}
}

// TestObjectSchemasClosed checks that every object schema that declares its
// properties rejects unknown ones, as the server does.
func TestObjectSchemasClosed(t *testing.T) {
	for _, name := range append([]string{"defs"}, wantNames...) {
		doc := rawDoc(t, name)
		delete(doc, "examples")
		walk("", doc, func(ptr string, obj map[string]any) {
			if obj["type"] != "object" {
				return
			}
			if strings.HasSuffix(ptr, "/$defs/metadata") || strings.HasSuffix(ptr, "/$defs/put_metadata") {
				return // free-form user data
			}
			if strings.HasSuffix(ptr, "/$defs/stored_reply") {
				return // any reply, as the idempotency cache kept it
			}
			if obj["additionalProperties"] != false {
				t.Errorf("%s#%s: object schema without \"additionalProperties\": false", name, ptr)
			}
		})
	}
}

// jsonFields returns the JSON names of the fields of a struct type and those
// that are always serialised (no omitempty).
func jsonFields(typ reflect.Type) (all, required []string) {
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		all = append(all, name)
		if !slices.Contains(strings.Split(opts, ","), "omitempty") {
			required = append(required, name)
		}
	}
	sort.Strings(all)
	sort.Strings(required)
	return all, required
}

func schemaFields(obj map[string]any) (all, required []string) {
	props, _ := obj["properties"].(map[string]any)
	for k := range props {
		all = append(all, k)
	}
	reqs, _ := obj["required"].([]any)
	for _, r := range reqs {
		required = append(required, r.(string))
	}
	sort.Strings(all)
	sort.Strings(required)
	return all, required
}

// resolveRef returns the schema that ref, written in document doc, points
// to: a whole message document ("kv.put.reply.json") or a definition
// ("defs.json#/$defs/key_value", or "#/$defs/key_value" inside defs.json).
// at names it as "<document>#<fragment>".
func resolveRef(t *testing.T, doc, ref string) (newDoc, at string, obj map[string]any) {
	t.Helper()
	file, frag, _ := strings.Cut(ref, "#")
	if file != "" {
		doc = strings.TrimSuffix(file, ".json")
	}
	obj = rawDoc(t, doc)
	if frag == "" {
		return doc, doc + "#", obj
	}
	def, ok := strings.CutPrefix(frag, "/$defs/")
	if !ok {
		t.Fatalf("%s: unexpected $ref %q", doc, ref)
	}
	defs, _ := obj["$defs"].(map[string]any)
	obj, ok = defs[def].(map[string]any)
	if !ok {
		t.Fatalf("%s: $ref %q points to nothing", doc, ref)
	}
	return doc, doc + "#" + frag, obj
}

// structElem returns the struct type a field of type typ carries, directly,
// through a pointer or as the elements of a slice (many reports the slice),
// or nil for a field that is not a struct (json.RawMessage included).
func structElem(typ reflect.Type) (elem reflect.Type, many bool) {
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ.Kind() == reflect.Slice {
		many = true
		typ = typ.Elem()
		if typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
	}
	if typ.Kind() != reflect.Struct {
		return nil, false
	}
	return typ, many
}

// txnDefs maps the transaction's shared definitions to their Go types.
var txnDefs = map[string]any{
	"txn_compare":  TxnCompare{},
	"txn_op":       TxnOp{},
	"txn_put":      TxnPut{},
	"txn_get":      TxnGet{},
	"txn_delete":   TxnDelete{},
	"txn_response": TxnResponse{},
}

// clusterDefs maps the cluster's shared definitions to their Go types.
var clusterDefs = map[string]any{
	"cluster_member": Member{},
	"node_info":      NodeInfo{},
}

// TestRequiredMatchesGoTypes checks that each object schema lists exactly
// the Go type's fields and requires exactly those serialised without
// omitempty. It follows every struct-typed field into its schema, through
// $ref into defs.json or another message's document, so nested objects
// (the records of a reply, a transaction's compares, operations and
// responses) are compared too, and it fails when an object definition in
// defs.json is reached by no Go type.
func TestRequiredMatchesGoTypes(t *testing.T) {
	reached := map[string]bool{}
	compared := map[string]bool{} // "<location> <Go type>" already compared
	var check func(label, doc string, obj map[string]any, typ reflect.Type)
	check = func(label, doc string, obj map[string]any, typ reflect.Type) {
		t.Helper()
		if ref, ok := obj["$ref"].(string); ok {
			var at string
			doc, at, obj = resolveRef(t, doc, ref)
			reached[at] = true
			if compared[at+" "+typ.String()] {
				return // each shared schema is reported once
			}
			compared[at+" "+typ.String()] = true
			label += " (" + at + ")"
		}
		goAll, goReq := jsonFields(typ)
		all, req := schemaFields(obj)
		if !slices.Equal(all, goAll) {
			t.Errorf("%s: schema properties %q, Go type %s has %q", label, all, typ, goAll)
		}
		if !slices.Equal(req, goReq) {
			t.Errorf("%s: schema requires %q, Go type %s always has %q", label, req, typ, goReq)
		}
		props, _ := obj["properties"].(map[string]any)
		for i := range typ.NumField() {
			f := typ.Field(i)
			elem, many := structElem(f.Type)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if elem == nil || !f.IsExported() || name == "-" {
				continue
			}
			sub, ok := props[name].(map[string]any)
			if !ok {
				continue // reported above
			}
			if many {
				if sub, ok = sub["items"].(map[string]any); !ok {
					t.Errorf("%s/%s: Go type %s is a slice, the schema has no items", label, name, f.Type)
					continue
				}
			}
			check(label+"/"+name, doc, sub, elem)
		}
	}
	for _, name := range wantNames {
		check(name, name, rawDoc(t, name), reflect.TypeOf(goTypes[name]))
	}
	defs := rawDoc(t, "defs")["$defs"].(map[string]any)
	named := map[string]any{"key_value": KeyValue{}, "lease_info": LeaseInfo{}}
	maps.Copy(named, txnDefs)
	maps.Copy(named, clusterDefs)
	for def, v := range named {
		obj, ok := defs[def].(map[string]any)
		if !ok {
			t.Errorf("defs.json has no %s", def)
			continue
		}
		check("defs/"+def, "defs", obj, reflect.TypeOf(v))
	}
	for def, v := range defs {
		if _, ok := v.(map[string]any)["properties"]; ok && !reached["defs#/$defs/"+def] {
			t.Errorf("defs/%s: no message reaches this object definition through a Go type", def)
		}
	}
}

// TestTxnCompareTargetsMatchGo checks the compare targets of txn_compare
// against the Go constants that the server maps.
func TestTxnCompareTargetsMatchGo(t *testing.T) {
	props := rawDoc(t, "defs")["$defs"].(map[string]any)["txn_compare"].(map[string]any)["properties"].(map[string]any)
	var targets []string
	for _, v := range props["target"].(map[string]any)["enum"].([]any) {
		targets = append(targets, v.(string))
	}
	want := []string{TargetExists, TargetValue, TargetField, TargetVersion, TargetCreateRevision, TargetModRevision, TargetLease, TargetTTL}
	if !slices.Equal(targets, want) {
		t.Errorf("txn_compare targets %q, Go constants %q", targets, want)
	}
	for _, target := range want {
		doc := fmt.Sprintf(`{"compare":[{"key":"a","target":%q,"op":"==","value":0}]}`, target)
		if target == TargetExists {
			doc = strings.Replace(doc, `"value":0`, `"value":true`, 1)
		}
		if target == TargetField {
			doc = strings.Replace(doc, `"value":0`, `"path":"/n","value":0`, 1)
		}
		if err := Validate("kv.txn.request", []byte(doc)); err != nil {
			t.Errorf("target %s: %v", target, err)
		}
	}
}

func TestErrorTableMatchesSchema(t *testing.T) {
	errObj := rawDoc(t, "error")["properties"].(map[string]any)["error"].(map[string]any)
	props := errObj["properties"].(map[string]any)
	var schemaNames []string
	for _, n := range props["name"].(map[string]any)["enum"].([]any) {
		schemaNames = append(schemaNames, n.(string))
	}
	var tableNames []string
	for _, e := range ErrorTable {
		tableNames = append(tableNames, e.Name)
	}
	if !slices.Equal(schemaNames, tableNames) {
		t.Errorf("error.json names %q, ErrorTable %q", schemaNames, tableNames)
	}
	for _, e := range ErrorTable {
		body := mustJSON(t, ErrorReply{Error: Errorf(e.Name, "lease %d not found", 7)})
		if err := Validate("error", body); err != nil {
			t.Errorf("%s: %v", e.Name, err)
		}
		wrong := mustJSON(t, ErrorReply{Error: &Error{Code: e.Code + 1, Name: e.Name, Description: "x"}})
		if err := Validate("error", wrong); err == nil {
			t.Errorf("%s with code %d accepted", e.Name, e.Code+1)
		}
	}
}

// Realistic, fully populated values of the Go types.
func sampleKV(leased bool) KeyValue {
	kv := KeyValue{
		Key:            "svc.api.n1",
		Value:          json.RawMessage(`{"addr":"10.0.0.5","port":8080}`),
		CreateRevision: 5,
		ModRevision:    9,
		Version:        3,
	}
	if leased {
		kv.Lease = 1
		kv.RemainingMS = ptr[int64](8712)
		kv.ContentType = "application/json"
		kv.Metadata = json.RawMessage(`{"owner":"ops"}`)
	}
	return kv
}

func sampleInfo(keys bool) LeaseInfo {
	li := LeaseInfo{
		ID:              1,
		TTL:             10,
		RemainingTTL:    8,
		RemainingMS:     8712,
		GrantedRevision: 4,
		Anonymous:       false,
		Metadata:        json.RawMessage(`{"owner":"billing","host":"n1"}`),
		KeyCount:        2,
	}
	if keys {
		li.Keys = []string{"svc.api.n1", "svc.api.n2"}
	}
	return li
}

// sampleClusterID and sampleHash are a cluster id and a state hash as the
// server makes them: 8 random bytes and a SHA-256, in lowercase hex.
const (
	sampleClusterID = "9f86d081884c7d65"
	sampleHash      = "3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7"
)

// sampleBackupID is a backup id as the leader makes them: 8 random bytes
// in lowercase hex.
const sampleBackupID = "5d41402abc4b2a76"

// sampleBackupReply describes a backup n1 took at revision 1843.
func sampleBackupReply() ClusterBackupReply {
	return ClusterBackupReply{ID: sampleBackupID, Size: 183220, SHA256: sampleHash, Revision: 1843, AppliedIndex: 1851,
		Format: "concord.fsm", FormatVersion: 3, ClusterID: sampleClusterID, Leader: "n1", Created: "2026-12-02T10:15:30.123456789Z",
		MaxChunk: 262144, IdleTimeoutMS: 60000}
}

// backupReplyWith returns sampleBackupReply changed by f, as JSON.
func backupReplyWith(f func(*ClusterBackupReply)) string {
	r := sampleBackupReply()
	f(&r)
	b, _ := json.Marshal(r)
	return string(b)
}

// sampleNode is the report of node id in a 3-node cluster that n1 leads
// in term 3. Without a hash the followers trail the leader by one applied
// entry; with one, every node has applied the same log and has its hash.
func sampleNode(id string, hash bool) NodeInfo {
	ni := NodeInfo{ID: id, ClusterID: sampleClusterID, State: "follower", Term: 3, Leader: "n1", LastIndex: 1850, CommitIndex: 1850, AppliedIndex: 1849, Revision: 1842, LogFormat: 3}
	if id == "n1" || hash {
		ni.AppliedIndex, ni.Revision = 1850, 1843
	}
	if id == "n1" {
		ni.State = "leader"
	}
	if hash {
		ni.StateHash = sampleHash
		ni.Conflict = sampleConflict
	}
	if hash {
		ni.Activity = "replaying log, entry 1849 of 1850"
		if id == "n1" {
			ni.Activity = "taking over as leader"
		}
	}
	return ni
}

// sampleConflict is what a node reports while another cluster serves its
// prefix on the bus.
const sampleConflict = "two Concord clusters serve this subject prefix on one NATS bus: this cluster 9f86d081884c7d65 and cluster 0c4e1f2a9b7d3e58 (node n1 answered)"

// sampleMembers is the configuration of that cluster, n1, n2 and n3 on
// loopback, all voters that answered.
func sampleMembers(hash bool) []Member {
	var out []Member
	for i, id := range []string{"n1", "n2", "n3"} {
		out = append(out, Member{ID: id, Address: fmt.Sprintf("127.0.0.1:%d", 7001+i), Suffrage: SuffrageVoter, Reachable: true, Node: ptr(sampleNode(id, hash))})
	}
	return out
}

// TestRoundTrip marshals fully populated replies and events from the Go
// types and validates them, so that a field added to or renamed in a Go type
// without its schema (or the reverse) fails here.
func TestRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		v    any
	}{
		{"lease.grant.reply", LeaseGrantReply{ID: 1, TTL: 10, Revision: 4}},
		{"lease.keepalive.reply", LeaseKeepAliveReply{ID: 1, TTL: 10, RemainingTTL: 10, RemainingMS: 10000}},
		{"lease.keepalive_many.request", LeaseKeepAliveManyRequest{IDs: []int64{1, 7, 42}}},
		{"lease.keepalive_many.reply", LeaseKeepAliveManyReply{Leases: []LeaseKeepAliveReply{{ID: 1, TTL: 10, RemainingTTL: 10, RemainingMS: 10000}, {ID: 42, TTL: 30, RemainingTTL: 30, RemainingMS: 30000}}, NotFound: []int64{7}}},
		{"lease.revoke.reply", LeaseRevokeReply{Revision: 12, Deleted: 2}},
		{"lease.info.reply", sampleInfo(true)},
		{"lease.list.reply", LeaseListReply{Leases: []LeaseInfo{sampleInfo(false), {ID: 7, TTL: 5, RemainingTTL: 4, RemainingMS: 4999, GrantedRevision: 8, Anonymous: true, Metadata: json.RawMessage(`{}`), KeyCount: 1}}, More: true}},
		{"kv.put.reply", KVPutReply{Revision: 10, PrevKV: ptr(sampleKV(true))}},
		{"kv.get.reply", KVGetReply{Revision: 10, KVs: []KeyValue{sampleKV(true), sampleKV(false)}, Count: 3, More: true}},
		{"kv.delete.reply", KVDeleteReply{Revision: 11, Deleted: 2, PrevKVs: []KeyValue{sampleKV(true), sampleKV(false)}}},
		{"kv.changes.request", KVChangesRequest{Prefix: ptr("svc."), AfterRevision: 1843, AfterOpIndex: ptr(2), Limit: 1000}},
		{"kv.changes.request", KVChangesRequest{Key: ptr("svc.api.n1"), AfterRevision: 9, AfterOpIndex: ptr(-1), Limit: 1}},
		{"kv.changes.request", KVChangesRequest{RangeStart: ptr("svc."), RangeEnd: ptr("svc/"), AfterRevision: 9, AfterOpIndex: ptr(0), Limit: 5}},
		{"kv.changes.reply", sampleChangesReply()},
		{"kv.history.request", KVHistoryRequest{Key: "svc.api.n1", FromRevision: 3, ToRevision: 9, Limit: 10, AfterRevision: 4, NewestFirst: true, Serializable: true}},
		{"kv.history.reply", KVHistoryReply{Key: "svc.api.n1", Records: sampleChangesReply().Events, More: true, NextRevision: 9, Revision: 12, CompactRevision: 2}},
		{"kv.compact.request", KVCompactRequest{Revision: 7}},
		{"kv.compact.reply", KVCompactReply{Revision: 12, CompactRevision: 7}},
		{"event", Event{Type: EventPut, Key: "svc.api.n1", Value: json.RawMessage(`{"addr":"10.0.0.5"}`), Revision: 9, OpIndex: 0, CreateRevision: 5, ModRevision: 9, Version: 3, Lease: 1, Cause: CausePut}},
		{"event", Event{Type: EventPut, Key: "config.db", Value: json.RawMessage(`1`), Revision: 9, OpIndex: 1, CreateRevision: 5, ModRevision: 9, Version: 3, Lease: 1, Cause: CausePut,
			ContentType: "application/json", Metadata: json.RawMessage(`{"owner":"ops"}`)}},
		{"event", Event{Type: EventDelete, Key: "svc.api.n2", Revision: 12, OpIndex: 1, ModRevision: 12, Lease: 1, Cause: CauseLeaseRevoked}},
		{"error", ErrorReply{Error: Errorf(ErrLeaseNotFound, "lease %d not found", 7)}},
		{"error", ErrorReply{Error: Errorf(ErrIdempotencyConflict, "idempotency key %q was used for a different request", "n1:req-1842")}},
		{"error", ErrorReply{Error: Errorf(ErrNodeNotFound, "node %s is not a member", "n4")}},
		{"error", ErrorReply{Error: Errorf(ErrClusterMismatch, "node %s belongs to cluster %s, not to this cluster %s", "n3", "0c4e1f2a9b7d3e58", sampleClusterID)}},
		{"cluster.join.request", ClusterJoinRequest{ID: "n3", Address: "127.0.0.1:7003", ClusterID: sampleClusterID}},
		// The service asks for no hashes on join and remove, but the value
		// sets every field so that the schema is checked against all of them.
		{"cluster.join.reply", ClusterJoinReply{ClusterID: sampleClusterID, Leader: "n1", Members: sampleMembers(true)}},
		{"cluster.remove.request", ClusterRemoveRequest{ID: "n3"}},
		{"cluster.remove.reply", ClusterRemoveReply{Members: sampleMembers(true)[:2]}},
		{"cluster.status.request", ClusterStatusRequest{Hash: true}},
		{"cluster.status.reply", ClusterStatusReply{ClusterID: sampleClusterID, Leader: "n1", Term: 3, Revision: 1843, CompactRevision: 843, Members: sampleMembers(true), Conflict: sampleConflict}},
		{"cluster.snapshot.request", ClusterSnapshotRequest{}},
		{"cluster.tenants.request", ClusterTenantsRequest{Tenant: "TENANT_A"}},
		{"cluster.tenants.reply", ClusterTenantsReply{Revision: 1843, DefaultQuota: &TenantQuota{Leases: 100, Keys: 1000, ValueBytes: 1 << 20, KeepAliveMany: 50, RequestsPerSecond: 200}, Tenants: sampleTenantsReply().Tenants[1:]}},
		{"cluster.quota.request", ClusterQuotaRequest{Tenant: "TENANT_A", Leases: 100, Keys: 1000, ValueBytes: 1 << 20, KeepAliveMany: 50, RequestsPerSecond: 200, Clear: true}},
		{"cluster.tenant.move.request", sampleMoveRequest()},
		{"cluster.tenant.move.reply", ClusterTenantMoveReply{Tenant: "TENANT_A", Revision: 1843}},
		{"cluster.tenant.export.request", ClusterTenantExportRequest{Tenant: "TENANT_A", Section: ExportKeys, After: "svc.a", Limit: 500}},
		{"cluster.tenant.export.reply", ClusterTenantExportReply{Tenant: "TENANT_A", To: "c2", FencedAt: 1843000, NextLeaseID: 8,
			Leases: sampleMoveRequest().Leases, Keys: sampleMoveRequest().Keys, Idempotency: sampleMoveRequest().Idempotency, More: true, Next: "svc.a"}},
		{"cluster.quota.reply", ClusterQuotaReply{Tenant: "TENANT_A", Quota: TenantQuota{Leases: 100, Keys: 1000, ValueBytes: 1 << 20, KeepAliveMany: 50, RequestsPerSecond: 200}, Revision: 1843}},
		{"cluster.snapshot.reply", ClusterSnapshotReply{Index: 1850}},
		{"cluster.backup.request", ClusterBackupRequest{}},
		{"cluster.backup.reply", sampleBackupReply()},
		{"cluster.backup.chunk.request", ClusterBackupChunkRequest{ID: sampleBackupID, Offset: 262144, Length: 65536}},
		// The reply's JSON form: what its headers say (the body is raw).
		{"cluster.backup.chunk.reply", ClusterBackupChunkReply{ID: sampleBackupID, Offset: 262144, Size: 183220, Data: []byte("{}\n")}},
		{"error", ErrorReply{Error: Errorf(ErrBackupNotFound, "backup %s not found", sampleBackupID)}},
		{"cluster.node.info.request", NodeInfoRequest{Hash: true}},
		{"cluster.node.info.reply", sampleNode("n2", true)},
		{"kv.txn.reply", sampleTxnReply()},
		{"kv.txn.reply", KVTxnReply{Succeeded: false, Revision: 1843, Responses: []TxnResponse{
			{Get: &KVGetReply{Revision: 1843, KVs: []KeyValue{sampleKV(true)}, Count: 1, More: true}},
			{Delete: &KVDeleteReply{Revision: 1843, Deleted: 2, PrevKVs: []KeyValue{sampleKV(true), sampleKV(false)}}},
		}}},
	}
	seen := map[string]bool{}
	txnKinds := map[string]bool{}
	changesKinds := map[string]bool{}
	for _, c := range cases {
		seen[c.name] = true
		if r, ok := c.v.(KVChangesRequest); ok {
			changesKinds["key"] = changesKinds["key"] || r.Key != nil
			changesKinds["prefix"] = changesKinds["prefix"] || r.Prefix != nil
			changesKinds["range"] = changesKinds["range"] || (r.RangeStart != nil && r.RangeEnd != nil)
		}
		if r, ok := c.v.(KVTxnReply); ok {
			txnKinds[fmt.Sprintf("succeeded=%v", r.Succeeded)] = true
			for _, resp := range r.Responses {
				kinds := 0
				for kind, set := range map[string]bool{"put": resp.Put != nil, "get": resp.Get != nil, "delete": resp.Delete != nil} {
					if set {
						kinds++
						txnKinds[kind] = true
					}
				}
				if kinds != 1 {
					t.Errorf("kv.txn.reply case: a response with %d kinds", kinds)
				}
			}
		}
		// Every field of the value must be set, or the test would not see a
		// field that the schema lacks.
		if _, ok := c.v.(ErrorReply); !ok {
			assertPopulated(t, c.name, reflect.ValueOf(c.v))
		}
		if err := Validate(c.name, mustJSON(t, c.v)); err != nil {
			t.Errorf("%s: %T does not validate: %v", c.name, c.v, err)
		}
	}
	for _, name := range wantNames {
		if (strings.HasSuffix(name, ".reply") || name == "event" || name == "error") && !seen[name] {
			t.Errorf("no round-trip case for %s", name)
		}
	}
	for _, kind := range []string{"succeeded=true", "succeeded=false", "put", "get", "delete"} {
		if !txnKinds[kind] {
			t.Errorf("no kv.txn.reply round-trip case with %s", kind)
		}
	}
	for _, kind := range []string{"key", "prefix", "range"} {
		if !changesKinds[kind] {
			t.Errorf("no kv.changes.request round-trip case with %s", kind)
		}
	}
}

// sampleChangesReply is a change-log read that stopped part-way through
// revision 1843 (limit reached after op_index 1): a put, a delete with its
// lease and the first event of a transaction's revision.
func sampleChangesReply() KVChangesReply {
	return KVChangesReply{
		Events: []Event{
			{Type: EventPut, Key: "svc.api.n1", Value: json.RawMessage(`{"addr":"10.0.0.5"}`), Revision: 1840, OpIndex: 0, CreateRevision: 5, ModRevision: 1840, Version: 3, Lease: 1, Cause: CausePut},
			{Type: EventDelete, Key: "svc.api.n2", Revision: 1842, OpIndex: 0, ModRevision: 1842, Lease: 7, Cause: CauseLeaseExpired},
			{Type: EventPut, Key: "svc.api.n3", Value: json.RawMessage(`"up"`), Revision: 1843, OpIndex: 1, CreateRevision: 1843, ModRevision: 1843, Version: 1, Lease: 42, Cause: CausePut},
		},
		NextRevision:    1843,
		NextOpIndex:     1,
		More:            true,
		CompactRevision: 1200,
	}
}

// sampleTxnReply is a fully populated transaction reply with one response
// of each kind.
func sampleTxnReply() KVTxnReply {
	return KVTxnReply{Succeeded: true, Revision: 1843, Responses: []TxnResponse{
		{Put: &KVPutReply{Revision: 1843, PrevKV: ptr(sampleKV(true))}},
		{Get: &KVGetReply{Revision: 1843, KVs: []KeyValue{sampleKV(true), sampleKV(false)}, Count: 2, More: true}},
		{Delete: &KVDeleteReply{Revision: 1843, Deleted: 1, PrevKVs: []KeyValue{sampleKV(false)}}},
	}}
}

// assertPopulated fails when a struct field (recursively) is the zero value,
// except fields that are zero by the rules (OpIndex of a first event, the
// revisions and version of a delete event, Anonymous, Succeeded of a
// transaction that took its failure branch, the two kinds a transaction
// response does not have, and the one of key and prefix a change-log read
// does not have; TestRoundTrip checks that its cases cover them).
func assertPopulated(t *testing.T, label string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			assertPopulated(t, label, v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			assertPopulated(t, fmt.Sprintf("%s[%d]", label, i), v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			fv := v.Field(i)
			switch {
			case slices.Contains([]string{"OpIndex", "Anonymous", "CreateRevision", "Version", "Value", "Lease", "RemainingMS", "Keys", "Succeeded", "ContentType", "Metadata"}, f.Name):
				// May be zero or absent by the rules; other cases cover them.
			case v.Type() == reflect.TypeFor[TxnResponse]():
				// Exactly one of Put, Get and Delete is set.
			case v.Type() == reflect.TypeFor[KVChangesRequest]() && slices.Contains([]string{"Key", "Prefix", "RangeStart", "RangeEnd"}, f.Name):
				// Exactly one of Key, Prefix and RangeStart is set.
			default:
				if fv.IsZero() {
					t.Errorf("%s: round-trip value leaves %s.%s unset", label, v.Type(), f.Name)
				}
			}
			assertPopulated(t, label+"."+f.Name, fv)
		}
	}
}

type example struct {
	name string
	doc  string
}

func js(t *testing.T, v any) string { return string(mustJSON(t, v)) }

// validExamples and invalidExamples hold the examples of every message
// but the requests in limitRequests, whose examples are in the schematest
// package (requests_test.go validates them), where the service's tests
// judge them too.
func validExamples(t *testing.T) []example {
	key := "svc.api.n1"
	return []example{
		// lease.grant
		{"lease.grant.reply", js(t, LeaseGrantReply{ID: 1, TTL: 10, Revision: 0})},
		// lease.keepalive
		{"lease.keepalive.reply", js(t, LeaseKeepAliveReply{ID: 1, TTL: 60, RemainingTTL: 60, RemainingMS: 60000})},
		{"lease.keepalive.reply", js(t, LeaseKeepAliveReply{ID: 9007199254740991, TTL: 1, RemainingTTL: 0, RemainingMS: 0})},
		// lease.keepalive_many
		{"lease.keepalive_many.reply", js(t, LeaseKeepAliveManyReply{Leases: []LeaseKeepAliveReply{{ID: 1, TTL: 10, RemainingTTL: 10, RemainingMS: 10000}}, NotFound: []int64{}})},
		{"lease.keepalive_many.reply", js(t, LeaseKeepAliveManyReply{Leases: []LeaseKeepAliveReply{}, NotFound: []int64{7, 9007199254740991}})},
		{"lease.keepalive_many.reply", js(t, LeaseKeepAliveManyReply{Leases: []LeaseKeepAliveReply{{ID: 1, TTL: 10, RemainingTTL: 10, RemainingMS: 10000}, {ID: 42, TTL: 1, RemainingTTL: 1, RemainingMS: 1000}}, NotFound: []int64{7}})},
		// lease.revoke
		{"lease.revoke.reply", js(t, LeaseRevokeReply{Revision: 0, Deleted: 0})},
		{"lease.revoke.reply", js(t, LeaseRevokeReply{Revision: 17, Deleted: 10000})},
		// lease.info
		{"lease.info.reply", js(t, sampleInfo(false))},
		{"lease.info.reply", js(t, sampleInfo(true))},
		{"lease.info.reply", js(t, LeaseInfo{ID: 5, TTL: 3, Anonymous: true, Metadata: json.RawMessage(`{}`), KeyCount: 1})},
		// lease.list
		{"lease.list.reply", js(t, LeaseListReply{Leases: []LeaseInfo{}, More: false})},
		{"lease.list.reply", js(t, LeaseListReply{Leases: []LeaseInfo{sampleInfo(false)}, More: true})},
		// kv.put
		{"kv.put.reply", js(t, KVPutReply{Revision: 5})},
		{"kv.put.reply", js(t, KVPutReply{Revision: 6, PrevKV: ptr(sampleKV(true))})},
		// kv.get
		{"kv.get.reply", js(t, KVGetReply{Revision: 5, KVs: []KeyValue{}, Count: 0})},
		{"kv.get.reply", js(t, KVGetReply{Revision: 9, KVs: []KeyValue{sampleKV(true), sampleKV(false)}, Count: 2})},
		{"kv.get.reply", js(t, KVGetReply{Revision: 9, KVs: []KeyValue{{Key: key, CreateRevision: 5, ModRevision: 9, Version: 3}}, Count: 40, More: true})},
		// kv.delete
		{"kv.delete.reply", js(t, KVDeleteReply{Revision: 9, Deleted: 0})},
		{"kv.delete.reply", js(t, KVDeleteReply{Revision: 10, Deleted: 1, PrevKVs: []KeyValue{sampleKV(false)}})},
		// kv.changes
		{"kv.changes.reply", js(t, KVChangesReply{Events: []Event{}, NextRevision: 0, NextOpIndex: -1, More: false, CompactRevision: 0})},
		{"kv.changes.reply", js(t, KVChangesReply{Events: []Event{}, NextRevision: 1843, NextOpIndex: -1, More: true, CompactRevision: 1200})}, // scan bound reached
		{"kv.changes.reply", js(t, sampleChangesReply())},
		{"kv.history.reply", js(t, KVHistoryReply{Key: key, Records: []Event{}, Revision: 0})},
		{"kv.history.reply", js(t, KVHistoryReply{Key: key, Records: sampleChangesReply().Events, More: true, NextRevision: 9, Revision: 12, CompactRevision: 2})},
		{"kv.compact.reply", js(t, KVCompactReply{Revision: 12, CompactRevision: 12})},
		{"kv.changes.reply", js(t, KVChangesReply{Events: []Event{{Type: EventDelete, Key: key, Revision: 8, OpIndex: 0, ModRevision: 8, Cause: CauseDelete}}, NextRevision: 8, NextOpIndex: 0, More: true, CompactRevision: 3})},
		// kv.txn
		{"kv.txn.reply", js(t, sampleTxnReply())},
		{"kv.txn.reply", js(t, KVTxnReply{Succeeded: true, Revision: 12, Responses: []TxnResponse{}})},
		{"kv.txn.reply", js(t, KVTxnReply{Succeeded: false, Revision: 7, Responses: []TxnResponse{{Get: &KVGetReply{Revision: 7, KVs: []KeyValue{}}}}})},
		{"kv.txn.reply", js(t, KVTxnReply{Succeeded: false, Revision: 7, Responses: []TxnResponse{{Get: &KVGetReply{Revision: 7, KVs: []KeyValue{sampleKV(true)}, Count: 1}}, {Put: &KVPutReply{Revision: 7}}}})},
		{"kv.txn.reply", js(t, KVTxnReply{Succeeded: true, Revision: 0, Responses: []TxnResponse{{Delete: &KVDeleteReply{Revision: 0, Deleted: 0}}}})},
		// event
		{"event", js(t, Event{Type: EventPut, Key: key, Value: json.RawMessage(`{"addr":"10.0.0.5"}`), Revision: 5, CreateRevision: 5, ModRevision: 5, Version: 1, Lease: 1, Cause: CausePut})},
		{"event", js(t, Event{Type: EventPut, Key: key, Value: json.RawMessage(`null`), Revision: 6, CreateRevision: 5, ModRevision: 6, Version: 2, Cause: CausePut})},
		{"event", js(t, Event{Type: EventDelete, Key: key, Revision: 7, ModRevision: 7, Cause: CauseDelete})},
		{"event", js(t, Event{Type: EventDelete, Key: key, Revision: 8, OpIndex: 3, ModRevision: 8, Lease: 1, Cause: CauseLeaseExpired})},
		{"event", js(t, Event{Type: EventDelete, Key: key, Revision: 8, OpIndex: 4, ModRevision: 8, Lease: 2, Cause: CauseLeaseRevoked})},
		// cluster.join
		{"cluster.join.request", js(t, ClusterJoinRequest{ID: "n2", Address: "127.0.0.1:7002"})},
		{"cluster.join.request", js(t, ClusterJoinRequest{ID: "n3", Address: "127.0.0.1:7003", ClusterID: sampleClusterID})},
		{"cluster.join.request", js(t, ClusterJoinRequest{ID: "concord_node-3", Address: "[::1]:7003"})},
		{"cluster.join.request", js(t, ClusterJoinRequest{ID: strings.Repeat("Z", 64), Address: "n3.concord.internal:7422", ClusterID: "0123456789abcdef"})},
		{"cluster.join.reply", js(t, ClusterJoinReply{ClusterID: sampleClusterID, Leader: "n1", Members: sampleMembers(false)})},
		{"cluster.join.reply", js(t, ClusterJoinReply{ClusterID: sampleClusterID, Leader: "n1", Members: []Member{
			{ID: "n1", Address: "127.0.0.1:7001", Suffrage: SuffrageVoter, Reachable: true, Node: ptr(sampleNode("n1", false))},
			{ID: "n2", Address: "127.0.0.1:7002", Suffrage: SuffrageVoter, Reachable: false},
		}})},
		// cluster.remove
		{"cluster.remove.request", js(t, ClusterRemoveRequest{ID: "n3"})},
		{"cluster.remove.reply", js(t, ClusterRemoveReply{Members: sampleMembers(false)[:2]})},
		{"cluster.remove.reply", js(t, ClusterRemoveReply{Members: []Member{}})},
		// cluster.status
		{"cluster.status.request", js(t, ClusterStatusRequest{})},
		{"cluster.status.request", js(t, ClusterStatusRequest{Hash: true})},
		{"cluster.status.request", `{"hash":false}`},
		{"cluster.status.reply", js(t, ClusterStatusReply{ClusterID: sampleClusterID, Leader: "n1", Term: 3, Revision: 1843, Members: sampleMembers(false)})},
		{"cluster.status.reply", js(t, ClusterStatusReply{ClusterID: sampleClusterID, Leader: "n1", Term: 3, Revision: 1843, Members: sampleMembers(true), Conflict: sampleConflict})},
		{"cluster.status.reply", js(t, ClusterStatusReply{ClusterID: sampleClusterID, Leader: "n2", Term: 4, Revision: 1843, Members: []Member{ // after a failover: n1 down, n3 demoted
			{ID: "n1", Address: "127.0.0.1:7001", Suffrage: SuffrageVoter, Reachable: false},
			{ID: "n2", Address: "127.0.0.1:7002", Suffrage: SuffrageVoter, Reachable: true, Node: &NodeInfo{ID: "n2", ClusterID: sampleClusterID, State: "leader", Term: 4, Leader: "n2", LastIndex: 1851, CommitIndex: 1851, AppliedIndex: 1851, Revision: 1843}},
			{ID: "n3", Address: "127.0.0.1:7003", Suffrage: SuffrageNonvoter, Reachable: true, Node: &NodeInfo{ID: "n3", ClusterID: sampleClusterID, State: "follower", Term: 4, Leader: "n2", LastIndex: 1851, CommitIndex: 1850, AppliedIndex: 1850, Revision: 1843}},
		}})},
		{"cluster.status.reply", js(t, ClusterStatusReply{ClusterID: sampleClusterID, Leader: "n1", Term: 1, Revision: 0, Members: []Member{ // a fresh single node
			{ID: "n1", Address: "127.0.0.1:7001", Suffrage: SuffrageVoter, Reachable: true, Node: &NodeInfo{ID: "n1", ClusterID: sampleClusterID, State: "leader", Term: 1, Leader: "n1", LastIndex: 1, CommitIndex: 1, AppliedIndex: 1}},
		}})},
		// cluster.snapshot
		{"cluster.snapshot.request", js(t, ClusterSnapshotRequest{})},
		{"cluster.snapshot.request", ` { } `},
		{"cluster.snapshot.reply", js(t, ClusterSnapshotReply{Index: 1850})},
		{"cluster.snapshot.reply", js(t, ClusterSnapshotReply{Index: 1})},
		{"cluster.tenants.request", `{}`},
		{"cluster.tenants.request", `{"tenant":"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567ABCDEFGHIJKLMNOPQRSTUV"}`},
		{"cluster.tenants.reply", js(t, sampleTenantsReply())},
		{"cluster.tenants.reply", js(t, ClusterTenantsReply{Revision: 0, Tenants: []TenantUsage{{}}})},
		{"cluster.quota.request", `{"tenant":"*","leases":10}`},
		{"cluster.quota.request", `{"tenant":"TENANT_A","clear":true}`},
		{"cluster.quota.request", js(t, ClusterQuotaRequest{Tenant: "B"})},
		{"cluster.quota.reply", js(t, ClusterQuotaReply{Tenant: "*", Revision: 1})},
		{"cluster.tenant.move.request", `{"tenant":"A","phase":"fence","to":"c2"}`},
		{"cluster.tenant.move.request", `{"tenant":"A","phase":"finish"}`},
		{"cluster.tenant.move.request", js(t, sampleMoveRequest())},
		{"cluster.tenant.move.reply", `{"tenant":"A","revision":0}`},
		{"cluster.tenant.export.request", `{"tenant":"A","section":"leases","after":"7"}`},
		{"cluster.tenant.export.reply", `{"tenant":"A","to":"c2","fenced_at":0,"next_lease_id":1,"more":false}`},
		// cluster.backup and cluster.backup.chunk
		{"cluster.backup.request", js(t, ClusterBackupRequest{})},
		{"cluster.backup.request", ` { } `},
		{"cluster.backup.reply", js(t, sampleBackupReply())},
		{"cluster.backup.reply", `{"id":"0000000000000000","size":1,"sha256":"` + strings.Repeat("0", 64) + `","revision":0,"applied_index":1,"format":"concord.fsm","format_version":1,"cluster_id":"` + sampleClusterID + `","leader":"n1","created":"2026-12-02T10:15:30Z","max_chunk":1,"idle_timeout_ms":1}`},
		{"cluster.backup.chunk.request", js(t, ClusterBackupChunkRequest{ID: sampleBackupID})},
		{"cluster.backup.chunk.request", js(t, ClusterBackupChunkRequest{ID: sampleBackupID, Offset: 9007199254740991, Length: 2147483647})},
		{"cluster.backup.chunk.request", `{"id":"5d41402abc4b2a76","offset":0,"length":0}`},
		{"cluster.backup.chunk.reply", js(t, ClusterBackupChunkReply{ID: sampleBackupID, Offset: 0, Size: 1})},
		{"cluster.backup.chunk.reply", js(t, ClusterBackupChunkReply{ID: sampleBackupID, Offset: 183220, Size: 183220})}, // the end: an empty body
		// cluster.node.<id>.info
		{"cluster.node.info.request", js(t, NodeInfoRequest{})},
		{"cluster.node.info.request", js(t, NodeInfoRequest{Hash: true})},
		{"cluster.node.info.reply", js(t, sampleNode("n2", false))},
		{"cluster.node.info.reply", js(t, sampleNode("n1", true))},
		{"cluster.node.info.reply", js(t, NodeInfo{ID: "n3", ClusterID: sampleClusterID, State: "candidate", Term: 5, Leader: "", LastIndex: 1851, CommitIndex: 1851, AppliedIndex: 1851, Revision: 1843})},
		{"cluster.node.info.reply", js(t, NodeInfo{ID: "n3", ClusterID: sampleClusterID, State: "shutdown", Term: 5, Leader: "", LastIndex: 1851, CommitIndex: 1850, AppliedIndex: 1850, Revision: 1843, StateHash: sampleHash})},
		{"cluster.node.info.reply", js(t, NodeInfo{ID: "n4", State: "follower"})}, // a new node before it joined
		// error
		{"error", `{"error":{"code":404,"name":"lease_not_found","description":"lease 7 not found"}}`},
		{"error", js(t, ErrorReply{Error: Errorf(ErrInvalidRequest, "ttl: must be at least 1")})},
		{"error", js(t, ErrorReply{Error: Errorf(ErrNotLeader, "not the leader")})},
		{"error", js(t, ErrorReply{Error: Errorf(ErrNodeNotFound, "node n4 is not a member")})},
		{"error", js(t, ErrorReply{Error: Errorf(ErrClusterMismatch, "node n3 belongs to cluster 0c4e1f2a9b7d3e58")})},
		{"error", js(t, ErrorReply{Error: Errorf(ErrBackupNotFound, "backup 5d41402abc4b2a76 not found")})},
	}
}

func invalidExamples() []example {
	return []example{
		// lease.grant
		{"lease.grant.reply", `{"id":1,"ttl":10}`},                      // missing revision
		{"lease.grant.reply", `{"id":0,"ttl":10,"revision":0}`},         // id 0
		{"lease.grant.reply", `{"id":1,"ttl":10,"revision":0,"x":1}`},   // unknown field
		{"lease.keepalive.reply", `{"id":1,"ttl":10,"remaining_ms":1}`}, // missing remaining_ttl
		{"lease.keepalive.reply", `{"id":1,"ttl":10,"remaining_ttl":-1,"remaining_ms":1}`},
		// lease.keepalive_many
		{"lease.keepalive_many.reply", `{"leases":[]}`},                                                                             // missing not_found
		{"lease.keepalive_many.reply", `{"not_found":[]}`},                                                                          // missing leases
		{"lease.keepalive_many.reply", `{"leases":null,"not_found":[]}`},                                                            // leases null
		{"lease.keepalive_many.reply", `{"leases":[],"not_found":null}`},                                                            // not_found null
		{"lease.keepalive_many.reply", `{"leases":[],"not_found":[0]}`},                                                             // id 0
		{"lease.keepalive_many.reply", `{"leases":[{"id":1,"ttl":10,"remaining_ms":1}],"not_found":[]}`},                            // lease without remaining_ttl
		{"lease.keepalive_many.reply", `{"leases":[{"id":1,"ttl":10,"remaining_ttl":1,"remaining_ms":1000,"x":1}],"not_found":[]}`}, // unknown field in a lease
		{"lease.keepalive_many.reply", `{"leases":[1],"not_found":[]}`},                                                             // a lease id, not a reply
		{"lease.keepalive_many.reply", `{"leases":[],"not_found":[],"revision":3}`},                                                 // unknown field
		{"lease.revoke.reply", `{"revision":1}`},
		{"lease.revoke.reply", `{"revision":1,"deleted":-1}`},
		{"lease.info.reply", `{"id":1,"ttl":10,"remaining_ttl":8,"remaining_ms":8000,"granted_revision":0,"anonymous":false,"key_count":0}`},                              // missing metadata
		{"lease.info.reply", `{"id":1,"ttl":10,"remaining_ttl":8,"remaining_ms":8000,"granted_revision":0,"anonymous":false,"metadata":null,"key_count":0}`},              // metadata null
		{"lease.info.reply", `{"id":1,"ttl":10,"remaining_ttl":8,"remaining_ms":8000,"granted_revision":0,"anonymous":false,"metadata":{},"key_count":1,"keys":["a b"]}`}, // bad key
		{"lease.info.reply", `{"id":1,"ttl":10,"remaining_ttl":8,"remaining_ms":8000,"granted_revision":0,"anonymous":false,"metadata":{},"key_count":0,"deadline":12}`},  // unknown field
		{"lease.info.reply", `{"id":1,"ttl":0,"remaining_ttl":8,"remaining_ms":8000,"granted_revision":0,"anonymous":false,"metadata":{},"key_count":0}`},                 // ttl 0
		{"lease.list.reply", `{"more":false}`},
		{"lease.list.reply", `{"leases":null,"more":false}`},
		{"lease.list.reply", `{"leases":[{"id":1,"ttl":10,"remaining_ttl":8,"remaining_ms":8000,"granted_revision":0,"anonymous":false,"metadata":{},"key_count":1,"keys":["a"]}],"more":false}`}, // keys in a listing
		// kv.put
		{"kv.put.reply", `{}`},
		{"kv.put.reply", `{"revision":0}`},
		{"kv.put.reply", `{"revision":5,"prev_kv":null}`},
		{"kv.put.reply", `{"revision":5,"prev_kv":{"key":"a","value":1,"create_revision":1,"mod_revision":1,"version":1,"remaining_ms":5}}`}, // remaining_ms without lease
		{"kv.put.reply", `{"revision":5,"prev_kv":{"key":"a","value":1,"create_revision":1,"mod_revision":1,"version":0}}`},                  // version 0
		{"kv.put.reply", `{"revision":5,"prev_kv":{"key":"a","value":1,"mod_revision":1,"version":1}}`},                                      // missing create_revision
		// kv.get
		{"kv.get.reply", `{"revision":1,"kvs":[],"count":0}`}, // missing more
		{"kv.get.reply", `{"revision":1,"kvs":null,"count":0,"more":false}`},
		{"kv.get.reply", `{"revision":1,"kvs":[{"key":"a","value":1}],"count":1,"more":false}`},
		{"kv.get.reply", `{"revision":1,"kvs":[],"count":0,"more":false,"header":{}}`},
		// kv.delete
		{"kv.delete.reply", `{"revision":1}`},
		{"kv.delete.reply", `{"revision":1,"deleted":1,"prev_kvs":{}}`},
		{"kv.delete.reply", `{"revision":"1","deleted":1}`},
		// kv.changes
		{"kv.history.reply", `{"key":"a","more":false,"revision":3,"compact_revision":0}`},                            // missing records
		{"kv.history.reply", `{"key":"a","records":null,"more":false,"revision":3,"compact_revision":0}`},             // records null
		{"kv.history.reply", `{"key":"a","records":[],"more":false,"revision":-3,"compact_revision":0}`},              // negative revision
		{"kv.history.reply", `{"key":"a","records":[{"type":"put"}],"more":false,"revision":3,"compact_revision":0}`}, // not an event
		{"kv.compact.reply", `{"revision":3}`},                                                                                    // missing compact_revision
		{"kv.compact.reply", `{"revision":3,"compact_revision":"1"}`},                                                             // string
		{"kv.changes.reply", `{"next_revision":3,"next_op_index":-1,"more":false,"compact_revision":0}`},                          // missing events
		{"kv.changes.reply", `{"events":null,"next_revision":3,"next_op_index":-1,"more":false,"compact_revision":0}`},            // events null
		{"kv.changes.reply", `{"events":[],"next_op_index":-1,"more":false,"compact_revision":0}`},                                // missing next_revision
		{"kv.changes.reply", `{"events":[],"next_revision":3,"more":false,"compact_revision":0}`},                                 // missing next_op_index
		{"kv.changes.reply", `{"events":[],"next_revision":3,"next_op_index":-1,"compact_revision":0}`},                           // missing more
		{"kv.changes.reply", `{"events":[],"next_revision":3,"next_op_index":-1,"more":false}`},                                   // missing compact_revision
		{"kv.changes.reply", `{"events":[],"next_revision":-1,"next_op_index":-1,"more":false,"compact_revision":0}`},             // negative next_revision
		{"kv.changes.reply", `{"events":[],"next_revision":3,"next_op_index":-2,"more":false,"compact_revision":0}`},              // next_op_index below -1
		{"kv.changes.reply", `{"events":[],"next_revision":3,"next_op_index":-1,"more":"false","compact_revision":0}`},            // wrong type
		{"kv.changes.reply", `{"events":[],"next_revision":3,"next_op_index":-1,"more":false,"compact_revision":-1}`},             // negative compact_revision
		{"kv.changes.reply", `{"events":[],"next_revision":3,"next_op_index":-1,"more":false,"compact_revision":0,"revision":3}`}, // unknown field
		{"kv.changes.reply", `{"events":[{"type":"put","key":"a","value":1,"revision":1,"create_revision":1,"mod_revision":1,"version":1,"lease":0,"cause":"put"}],"next_revision":1,"next_op_index":-1,"more":false,"compact_revision":0}`},                       // an event without op_index
		{"kv.changes.reply", `{"events":[{"type":"delete","key":"a","value":1,"revision":2,"op_index":0,"create_revision":0,"mod_revision":2,"version":0,"lease":0,"cause":"delete"}],"next_revision":2,"next_op_index":-1,"more":false,"compact_revision":0}`},    // value on a delete event
		{"kv.changes.reply", `{"events":[{"type":"put","key":"a","value":1,"revision":1,"op_index":0,"create_revision":1,"mod_revision":1,"version":1,"lease":0,"cause":"put","prev":1}],"next_revision":1,"next_op_index":-1,"more":false,"compact_revision":0}`}, // unknown field in an event
		// kv.txn reply
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":[{"put":{"revision":2},"get":{"revision":2,"kvs":[],"count":0,"more":false}}]}`}, // two kinds
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":[{"put":{"revision":2},"delete":{"revision":2,"deleted":1}}]}`},                  // two kinds
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":[{}]}`},                                                                          // no kind
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":[{"put":{"revision":2},"index":0}]}`},                                            // unknown field
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":[{"put":{"revision":2,"header":{}}}]}`},                                          // unknown field in a put reply
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":[{"put":{"revision":0}}]}`},                                                      // put reply revision 0
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":[{"get":{"revision":2,"kvs":[],"count":0}}]}`},                                   // get reply without more
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":[{"delete":{"revision":2,"deleted":-1}}]}`},                                      // negative deleted
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":[{"put":null}]}`},
		{"kv.txn.reply", `{"revision":2,"responses":[]}`},                              // missing succeeded
		{"kv.txn.reply", `{"succeeded":true,"responses":[]}`},                          // missing revision
		{"kv.txn.reply", `{"succeeded":true,"revision":2}`},                            // missing responses
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":null}`},           // responses null
		{"kv.txn.reply", `{"succeeded":"true","revision":2,"responses":[]}`},           // wrong type
		{"kv.txn.reply", `{"succeeded":true,"revision":-1,"responses":[]}`},            // negative revision
		{"kv.txn.reply", `{"succeeded":true,"revision":2,"responses":[],"header":{}}`}, // unknown field
		// event
		{"event", `{"type":"patch","key":"a","value":1,"revision":1,"op_index":0,"create_revision":1,"mod_revision":1,"version":1,"lease":0,"cause":"put"}`},        // bad type
		{"event", `{"type":"delete","key":"a","value":1,"revision":2,"op_index":0,"create_revision":0,"mod_revision":2,"version":0,"lease":0,"cause":"delete"}`},    // value on delete
		{"event", `{"type":"delete","key":"a","value":null,"revision":2,"op_index":0,"create_revision":0,"mod_revision":2,"version":0,"lease":0,"cause":"delete"}`}, // value on delete
		{"event", `{"type":"put","key":"a","revision":1,"op_index":0,"create_revision":1,"mod_revision":1,"version":1,"lease":0,"cause":"put"}`},                    // put without value
		{"event", `{"type":"put","key":"a","value":1,"revision":1,"op_index":0,"create_revision":1,"mod_revision":1,"version":1,"lease":0,"cause":"expired"}`},      // bad cause
		{"event", `{"type":"put","key":"a","value":1,"revision":1,"op_index":0,"create_revision":1,"mod_revision":1,"version":1,"lease":0,"cause":"delete"}`},       // put with a delete cause
		{"event", `{"type":"delete","key":"a","revision":2,"op_index":0,"create_revision":0,"mod_revision":2,"version":0,"lease":0,"cause":"put"}`},                 // delete with cause put
		{"event", `{"type":"delete","key":"a","revision":2,"op_index":0,"create_revision":0,"mod_revision":2,"version":0,"lease":0,"cause":"lease_expired"}`},       // expiry without lease
		{"event", `{"type":"delete","key":"a","revision":2,"op_index":0,"create_revision":1,"mod_revision":2,"version":1,"lease":0,"cause":"delete"}`},              // delete with a version
		{"event", `{"type":"put","key":"a","value":1,"revision":1,"op_index":0,"create_revision":1,"mod_revision":1,"version":1,"cause":"put"}`},                    // missing lease
		{"event", `{"type":"put","key":"a","value":1,"revision":1,"op_index":-1,"create_revision":1,"mod_revision":1,"version":1,"lease":0,"cause":"put"}`},
		{"event", `{"type":"put","key":"a b","value":1,"revision":1,"op_index":0,"create_revision":1,"mod_revision":1,"version":1,"lease":0,"cause":"put"}`},
		{"event", `{"type":"put","key":"a","value":1,"revision":1,"op_index":0,"create_revision":1,"mod_revision":1,"version":1,"lease":0,"cause":"put","prev":1}`},
		// cluster.join request
		{"cluster.join.request", `{}`},                                                                  // missing id and address
		{"cluster.join.request", `{"id":"n2"}`},                                                         // missing address
		{"cluster.join.request", `{"address":"127.0.0.1:7002"}`},                                        // missing id
		{"cluster.join.request", `{"id":"n.2","address":"127.0.0.1:7002"}`},                             // a dot in the id
		{"cluster.join.request", `{"id":"n 2","address":"127.0.0.1:7002"}`},                             // a space in the id
		{"cluster.join.request", `{"id":"","address":"127.0.0.1:7002"}`},                                // empty id
		{"cluster.join.request", `{"id":"` + strings.Repeat("n", 65) + `","address":"127.0.0.1:7002"}`}, // id too long
		{"cluster.join.request", `{"id":"n*","address":"127.0.0.1:7002"}`},                              // wildcard in the id
		{"cluster.join.request", `{"id":2,"address":"127.0.0.1:7002"}`},                                 // wrong type
		{"cluster.join.request", `{"id":"n2","address":""}`},                                            // empty address
		{"cluster.join.request", `{"id":"n2","address":"127.0.0.1"}`},                                   // no port
		{"cluster.join.request", `{"id":"n2","address":"127.0.0.1:7002","cluster_id":""}`},              // empty cluster id (omitted when none)
		{"cluster.join.request", `{"id":"n2","address":"127.0.0.1:7002","cluster_id":"9F86D081884C7D65"}`},
		{"cluster.join.request", `{"id":"n2","address":"127.0.0.1:7002","cluster_id":"9f86d081884c7d6"}`},
		{"cluster.join.request", `{"id":"n2","address":"127.0.0.1:7002","cluster_id":"9f86d081884c7d65a"}`},
		{"cluster.join.request", `{"id":"n2","address":"127.0.0.1:7002","cluster_id":"9f86d081884c7d6g"}`},
		{"cluster.join.request", `{"id":"n2","address":"127.0.0.1:7002","suffrage":"voter"}`}, // unknown field
		{"cluster.join.request", `[{"id":"n2","address":"127.0.0.1:7002"}]`},
		// cluster.join reply
		{"cluster.join.reply", `{"leader":"n1","members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false}]}`},                               // missing cluster_id
		{"cluster.join.reply", `{"cluster_id":"","leader":"n1","members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false}]}`},               // empty cluster_id
		{"cluster.join.reply", `{"cluster_id":"9f86d081884c7d65","leader":"","members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false}]}`}, // the leader answers
		{"cluster.join.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","members":[]}`},                                                                          // no members
		{"cluster.join.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1"}`},                                                                                       // missing members
		{"cluster.join.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"learner","reachable":false}]}`},
		{"cluster.join.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter"}]}`},                                                                                                                                                                                // missing reachable
		{"cluster.join.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","members":[{"id":"n1","suffrage":"voter","reachable":false}]}`},                                                                                                                                                                                         // missing address
		{"cluster.join.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":true}]}`},                                                                                                                                                               // reachable without a report
		{"cluster.join.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false,"node":{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":2,"leader":"n1","last_index":12,"commit_index":12,"applied_index":12,"revision":4}}]}`}, // a report from an unreachable member
		{"cluster.join.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false,"raft":"x"}]}`},                                                                                                                                                   // unknown field in a member
		{"cluster.join.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false}],"term":2}`},                                                                                                                                                     // unknown field
		// cluster.remove
		{"cluster.remove.request", `{}`},                       // missing id
		{"cluster.remove.request", `{"id":"n1.x"}`},            // a dot in the id
		{"cluster.remove.request", `{"id":" n1"}`},             // a space in the id
		{"cluster.remove.request", `{"id":"n1","force":true}`}, // unknown field
		{"cluster.remove.request", `{"id":null}`},
		{"cluster.remove.reply", `{}`}, // missing members
		{"cluster.remove.reply", `{"members":null}`},
		{"cluster.remove.reply", `{"members":[{"id":"n 2","address":"127.0.0.1:7002","suffrage":"voter","reachable":false}]}`}, // a space in a member id
		{"cluster.remove.reply", `{"members":[],"removed":"n3"}`},                                                              // unknown field
		// cluster.status
		{"cluster.status.request", `{"hash":"yes"}`},
		{"cluster.status.request", `{"hash":null}`},
		{"cluster.status.request", `{"verbose":true}`}, // unknown field
		{"cluster.status.request", `[]`},
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":3,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":true,"node":{"id":"n1","cluster_id":"9f86d081884c7d65","state":"observer","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}}]}`},                                                                               // unknown state
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":3,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":true,"node":{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843,"state_hash":"3a6eb0790f39ac87"}}]}`},                                                 // short hash
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":3,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":true,"node":{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843,"state_hash":"3A6EB0790F39AC87C94F3856B2DD2C5D110E6811602261A9A923D3BB23ADC8B7"}}]}`}, // uppercase hash
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":3,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":true,"node":{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843,"state_hash":""}}]}`},                                                                 // empty hash (omitted when not asked for)
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":3,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":true,"node":{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"revision":1843}}]}`},                                                                                                      // report without applied_index
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":3,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":true,"node":{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843,"lag":0}}]}`},                                                                         // unknown field in a report
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":3,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":true,"node":{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n.1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}}]}`},                                                                                // a dot in the leader's id
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":3,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":true,"node":{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":-1,"commit_index":1850,"applied_index":1850,"revision":1843}}]}`},                                                                                   // negative index
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":-1,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false}]}`},                                                                                                                                                                                                                                                     // negative term
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":1.5,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false}]}`},                                                                                                                                                                                                                                                    // fractional term
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false}]}`},                                                                                                                                                                                                                                                               // missing term
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":3,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false}]}`},                                                                                                                                                                                                                                                                      // missing revision
		{"cluster.status.reply", `{"cluster_id":"9f86d081884c7d65","leader":"n1","term":3,"revision":1843,"members":[{"id":"n1","address":"127.0.0.1:7001","suffrage":"voter","reachable":false}],"commit_index":1850}`},                                                                                                                                                                                                                                  // unknown field
		// cluster.snapshot
		{"cluster.snapshot.request", `{"force":true}`}, // unknown field
		{"cluster.tenants.request", `{"tenant":"a.b"}`},
		{"cluster.tenants.request", `{"tenant":""}`},
		{"cluster.tenants.request", `{"tenants":"A"}`},
		{"cluster.tenants.reply", `{"revision":1}`},
		{"cluster.tenants.reply", `{"revision":1,"tenants":[{"tenant":"A"}]}`},
		{"cluster.quota.request", `{}`},
		{"cluster.quota.request", `{"tenant":"A","leases":-1}`},
		{"cluster.quota.request", `{"tenant":"a.*"}`},
		{"cluster.quota.request", `{"tenant":"A","burst":1}`},
		{"cluster.quota.reply", `{"tenant":"A","revision":1}`},
		{"cluster.tenant.move.request", `{"tenant":"A","phase":"jump"}`},
		{"cluster.tenant.move.reply", `{"tenant":"A"}`},
		{"cluster.tenant.move.request", `{"tenant":"A.B","phase":"fence"}`},
		{"cluster.tenant.move.request", `{"tenant":"A","phase":"import","leases":[{"id":1,"ttl":0,"remaining_ms":5}]}`},
		{"cluster.tenant.move.request", `{"tenant":"A","phase":"import","idempotency":[{"key":"k","hash":"zz","reply":{}}]}`},
		{"cluster.tenant.export.request", `{"tenant":"A","section":"values"}`},
		{"cluster.tenant.export.request", `{"tenant":"A","section":"keys","limit":0}`},
		{"cluster.tenant.export.reply", `{"tenant":"A","more":false}`},
		{"cluster.snapshot.request", `null`},
		{"cluster.snapshot.request", `[]`},
		{"cluster.snapshot.reply", `{}`},          // missing index
		{"cluster.snapshot.reply", `{"index":0}`}, // a snapshot covers at least one entry
		{"cluster.snapshot.reply", `{"index":-1}`},
		{"cluster.snapshot.reply", `{"index":"1850"}`},
		{"cluster.snapshot.reply", `{"index":1850,"term":3}`}, // unknown field
		// cluster.node.<id>.info
		{"cluster.node.info.request", `{"hash":1}`},
		{"cluster.node.info.request", `{"id":"n1"}`}, // unknown field: the id is in the subject
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d65","state":"Leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}`},                                        // raft's spelling, not lowercased
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d65","state":"unknown","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}`},                                       // unknown state
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":null,"last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}`},                                        // leader null, not ""
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}`},                                                      // missing leader
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1 ","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}`},                                       // a space in the leader's id
		{"cluster.node.info.reply", `{"id":"n1.a","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}`},                                      // a dot in the id
		{"cluster.node.info.reply", `{"cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}`},                                                  // missing id
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843,"state_hash":"` + sampleHash[:63] + `"}`}, // short hash
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843,"state_hash":"` + sampleHash + `0"}`},     // long hash
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843,"state_hash":"sha256:` + sampleHash[:57] + `"}`},
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":-1}`},         // negative revision
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843,"x":1}`}, // unknown field
		{"cluster.node.info.reply", `{"id":"n1","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}`},                                       // missing cluster_id
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":null,"state":"follower","term":0,"leader":"","last_index":0,"commit_index":0,"applied_index":0,"revision":0}`},                                 // cluster_id null, not ""
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9f86d081884c7d6","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}`},        // short cluster_id
		{"cluster.node.info.reply", `{"id":"n1","cluster_id":"9F86D081884C7D65","state":"leader","term":3,"leader":"n1","last_index":1850,"commit_index":1850,"applied_index":1850,"revision":1843}`},       // uppercase cluster_id
		// error
		{"error", `{"code":404,"name":"lease_not_found","description":"x"}`},                         // not wrapped
		{"error", `{"error":{"code":404,"name":"lease_not_found"}}`},                                 // missing description
		{"error", `{"error":{"code":404,"name":"lease_missing","description":"x"}}`},                 // unknown name
		{"error", `{"error":{"code":"404","name":"lease_not_found","description":"x"}}`},             // wrong type
		{"error", `{"error":{"code":500,"name":"lease_not_found","description":"x"}}`},               // code does not match name
		{"error", `{"error":{"code":404,"name":"lease_not_found","description":"x","retry":false}}`}, // unknown field
		{"error", `{"error":{"code":404,"name":"lease_not_found","description":"x"},"request":"a"}`}, // unknown field
		{"error", `{"error":null}`},
		{"error", `{"error":{"code":400,"name":"idempotency_conflict","description":"x"}}`}, // code does not match name
		{"error", `{"error":{"code":409,"name":"node_not_found","description":"x"}}`},       // code does not match name
		{"error", `{"error":{"code":404,"name":"cluster_mismatch","description":"x"}}`},     // code does not match name
		{"error", `{"error":{"code":410,"name":"backup_not_found","description":"x"}}`},     // code does not match name
		// cluster.backup
		{"cluster.backup.request", `{"id":"5d41402abc4b2a76"}`},                                              // unknown field
		{"cluster.backup.request", `[]`},                                                                     // not an object
		{"cluster.backup.reply", backupReplyWith(func(r *ClusterBackupReply) { r.SHA256 = "XYZ" })},          // not a SHA-256
		{"cluster.backup.reply", backupReplyWith(func(r *ClusterBackupReply) { r.Format = "concord.raft" })}, // another format
		{"cluster.backup.reply", backupReplyWith(func(r *ClusterBackupReply) { r.ID = "5D41402ABC4B2A76" })}, // upper-case id
		{"cluster.backup.reply", backupReplyWith(func(r *ClusterBackupReply) { r.Size = 0 })},                // an empty payload
		{"cluster.backup.reply", `{"id":"5d41402abc4b2a76","size":1}`},                                       // missing fields
		// cluster.backup.chunk
		{"cluster.backup.chunk.request", `{"offset":0}`},                                          // missing id
		{"cluster.backup.chunk.request", `{"id":"5d41402abc4b2a76"}`},                             // missing offset
		{"cluster.backup.chunk.request", `{"id":"5d41402abc4b2a76","offset":-1}`},                 // negative offset
		{"cluster.backup.chunk.request", `{"id":"5d41402abc4b2a76","offset":0,"length":-1}`},      // negative length
		{"cluster.backup.chunk.request", `{"id":"../etc/passwd","offset":0}`},                     // not an id
		{"cluster.backup.chunk.request", `{"id":"5d41402abc4b2a76","offset":0,"whence":"set"}`},   // unknown field
		{"cluster.backup.chunk.reply", `{"id":"5d41402abc4b2a76","offset":0}`},                    // missing size
		{"cluster.backup.chunk.reply", `{"id":"5d41402abc4b2a76","offset":-1,"size":1}`},          // negative offset
		{"cluster.backup.chunk.reply", `{"id":"5d41402abc4b2a76","offset":0,"size":1,"data":""}`}, // the data is the body, not a field
	}
}

func TestValidExamples(t *testing.T) {
	counts := map[string]int{}
	for i, ex := range validExamples(t) {
		counts[ex.name]++
		if err := Validate(ex.name, []byte(ex.doc)); err != nil {
			t.Errorf("valid #%d %s %s rejected: %v", i, ex.name, ex.doc, err)
		}
	}
	for _, name := range wantNames {
		if counts[name] == 0 && !slices.Contains(limitRequests, name) {
			t.Errorf("no valid example for %s", name)
		}
	}
}

func TestInvalidExamples(t *testing.T) {
	counts := map[string]int{}
	for i, ex := range invalidExamples() {
		counts[ex.name]++
		if err := Validate(ex.name, []byte(ex.doc)); err == nil {
			t.Errorf("invalid #%d %s %s accepted", i, ex.name, ex.doc)
		}
	}
	for _, name := range wantNames {
		if counts[name] == 0 && !slices.Contains(limitRequests, name) {
			t.Errorf("no invalid example for %s", name)
		}
	}
}

// TestKeyRulesMatchSubjects checks the schema's key and prefix patterns
// against the subjects package, which the server uses.
func TestKeyRulesMatchSubjects(t *testing.T) {
	var candidates []string
	for c := 0; c < 128; c++ {
		ch := string(rune(c))
		candidates = append(candidates, ch, "a"+ch, ch+"b", "a"+ch+"b", "a."+ch, ch+".b", "a."+ch+".b")
	}
	candidates = append(candidates, "", ".", "..", "a.", ".a", "a..b", "a.b.", "svc.api.n1", "\u00e9", "a\u00e9",
		strings.Repeat("x", 1024), strings.Repeat("x", 1025), strings.Repeat("a.", 511)+"ab", strings.Repeat("a.", 512))
	for _, k := range candidates {
		keyErr := subjects.ValidateKey(k, subjects.MaxKeyBytes)
		doc := js(t, map[string]any{"key": k, "value": 1})
		if err := Validate("kv.put.request", []byte(doc)); (err == nil) != (keyErr == nil) {
			t.Errorf("key %q: schema valid=%v, subjects.ValidateKey: %v", k, err == nil, keyErr)
		}
		prefixErr := subjects.ValidatePrefix(k, subjects.MaxKeyBytes)
		doc = js(t, map[string]any{"prefix": k})
		if err := Validate("kv.get.request", []byte(doc)); (err == nil) != (prefixErr == nil) {
			t.Errorf("prefix %q: schema valid=%v, subjects.ValidatePrefix: %v", k, err == nil, prefixErr)
		}
	}
}

// TestNodeIDRulesMatchSubjects checks the schema's node id pattern against
// subjects.ValidateNodeID, which the server uses, where an id is required
// (cluster.remove.request) and where "" means none (a report's leader).
func TestNodeIDRulesMatchSubjects(t *testing.T) {
	var candidates []string
	for c := 0; c < 128; c++ {
		ch := string(rune(c))
		candidates = append(candidates, ch, "n"+ch, ch+"1", "n"+ch+"1")
	}
	candidates = append(candidates, "", "n1", "\u00e9", "n\u00e9", "n1\n", strings.Repeat("x", 63), strings.Repeat("x", 64), strings.Repeat("x", 65))
	for _, id := range candidates {
		idErr := subjects.ValidateNodeID(id)
		doc := js(t, ClusterRemoveRequest{ID: id})
		if err := Validate("cluster.remove.request", []byte(doc)); (err == nil) != (idErr == nil) {
			t.Errorf("id %q: schema valid=%v, subjects.ValidateNodeID: %v", id, err == nil, idErr)
		}
		doc = js(t, NodeInfo{ID: "n1", State: "follower", Leader: id})
		if err := Validate("cluster.node.info.reply", []byte(doc)); (err == nil) != (idErr == nil || id == "") {
			t.Errorf("leader %q: schema valid=%v, subjects.ValidateNodeID: %v", id, err == nil, idErr)
		}
	}
}

// TestClusterEnumsMatchGo checks the suffrage enum against the Go constants
// and the state enum against the states of hashicorp/raft in lower case, as
// the server spells them.
func TestClusterEnumsMatchGo(t *testing.T) {
	defs := rawDoc(t, "defs")["$defs"].(map[string]any)
	enum := func(def, prop string) []string {
		props := defs[def].(map[string]any)["properties"].(map[string]any)
		var out []string
		for _, v := range props[prop].(map[string]any)["enum"].([]any) {
			out = append(out, v.(string))
		}
		return out
	}
	if got, want := enum("cluster_member", "suffrage"), []string{SuffrageVoter, SuffrageNonvoter}; !slices.Equal(got, want) {
		t.Errorf("cluster_member suffrages %q, Go constants %q", got, want)
	}
	var states []string
	for _, st := range []raft.RaftState{raft.Leader, raft.Follower, raft.Candidate, raft.Shutdown} {
		states = append(states, strings.ToLower(st.String()))
	}
	states = append(states, NodeStateStarting)
	if got := enum("node_info", "state"); !slices.Equal(got, states) {
		t.Errorf("node_info states %q, raft states %q", got, states)
	}
}

func TestValidateConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				doc := fmt.Sprintf(`{"id":%d,"ttl":10,"revision":%d}`, i+1, j)
				if err := Validate("lease.grant.reply", []byte(doc)); err != nil {
					t.Error(err)
					return
				}
				if err := Validate("lease.grant.reply", []byte(`{"id":0}`)); err == nil {
					t.Error("invalid reply accepted")
					return
				}
			}
		}()
	}
	wg.Wait()
}

func BenchmarkValidateEvent(b *testing.B) {
	doc, _ := json.Marshal(Event{Type: EventPut, Key: "svc.api.n1", Value: json.RawMessage(`{"addr":"10.0.0.5"}`), Revision: 9, CreateRevision: 5, ModRevision: 9, Version: 3, Lease: 1, Cause: CausePut})
	for b.Loop() {
		if err := Validate("event", doc); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSchemaExamples checks that the examples embedded in each schema, which
// other-language clients read as documentation, are valid.
func TestSchemaExamples(t *testing.T) {
	for _, name := range wantNames {
		examples, _ := rawDoc(t, name)["examples"].([]any)
		if len(examples) == 0 {
			t.Errorf("%s: no examples", name)
		}
		for i, ex := range examples {
			if err := Validate(name, mustJSON(t, ex)); err != nil {
				t.Errorf("%s: example %d: %v", name, i, err)
			}
		}
	}
}

func sampleTenantsReply() ClusterTenantsReply {
	q := TenantQuota{Leases: 100, Keys: 1000, ValueBytes: 1 << 20, KeepAliveMany: 50, RequestsPerSecond: 200}
	return ClusterTenantsReply{Revision: 1843, DefaultQuota: &TenantQuota{Leases: 10}, Tenants: []TenantUsage{
		{Keys: 12, Leases: 2, ValueBytes: 420, HistoryChanges: 40},
		{Tenant: "TENANT_A", Keys: 3, Leases: 1, AnonymousLeases: 1, ValueBytes: 96, HistoryChanges: 5, CompactRevision: 2, Quota: &q},
	}}
}

func sampleMoveRequest() ClusterTenantMoveRequest {
	return ClusterTenantMoveRequest{Tenant: "TENANT_A", Phase: MoveImport, To: "c2", NextLeaseID: 8,
		Leases:      []MovedLease{{ID: 7, TTL: 10, RemainingMS: 6500, Anonymous: true, Metadata: json.RawMessage(`{"o":1}`)}},
		Keys:        []MovedKey{{Key: "svc.a", Value: json.RawMessage(`{"addr":"10.0.0.5"}`), Version: 3, Lease: 7, ContentType: "application/json", Metadata: json.RawMessage(`{"m":2}`)}},
		Idempotency: []MovedIdem{{Key: "req-1", Hash: strings.Repeat("ab", 32), Reply: json.RawMessage(`{"id":7}`)}}}
}
