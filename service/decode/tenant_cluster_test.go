package decode

import (
	"strings"
	"testing"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

// The tenant endpoints' decoders: what they accept becomes the command
// as sent; every refusal names the field.
func TestTenantClusterDecoders(t *testing.T) {
	d := New(Limits{MinTTL: 1, MaxKeyBytes: 64, MaxValueBytes: 16, MaxMetadataBytes: 32, MaxTxnCompares: 1, MaxTxnOps: 1, MaxTxnBytes: 1024}, 1<<20)
	q, e := d.Quota([]byte(`{"tenant":"A","leases":1,"keys":2,"value_bytes":3,"keepalive_many":4,"requests_per_second":5}`))
	if e != nil || *q != (fsm.SetQuota{Tenant: "A", Quota: fsm.Quota{Leases: 1, Keys: 2, ValueBytes: 3, KeepAliveMany: 4, RequestsPerSecond: 5}}) {
		t.Fatalf("quota: %+v %v", q, e)
	}
	if q, e := d.Quota([]byte(`{"tenant":"*","clear":true}`)); e != nil || !q.Clear || q.Tenant != fsm.QuotaDefault {
		t.Fatalf("clear the default: %+v %v", q, e)
	}
	m, e := d.TenantMove([]byte(`{"tenant":"A","phase":"import","leases":[{"id":7,"ttl":10,"remaining_ms":5,"metadata":{ "o" : 1 }}],` +
		`"keys":[{"key":"k","value":{ "a" : 1 },"version":2,"lease":7}],"idempotency":[{"key":"r","hash":"` + strings.Repeat("0a", 32) + `","reply":{"id":7}}]}`))
	if e != nil || m.Phase != fsm.MoveImport || string(m.Leases[0].Metadata) != `{"o":1}` || string(m.Keys[0].Value) != `{"a":1}` || m.Idempotency[0].Hash[0] != 0x0a {
		t.Fatalf("import: %+v %v", m, e)
	}
	if m, e := d.TenantMove([]byte(`{"tenant":"A","phase":"fence","to":"c2"}`)); e != nil || m.To != "c2" {
		t.Fatalf("fence: %+v %v", m, e)
	}
	if r, e := d.TenantExport([]byte(`{"tenant":"A","section":"keys"}`)); e != nil || r.Limit != DefaultExportLimit {
		t.Fatalf("export: %+v %v", r, e)
	}
	if r, e := d.Tenants([]byte(`{}`)); e != nil || r.Tenant != "" {
		t.Fatalf("tenants: %+v %v", r, e)
	}
	for _, c := range []struct {
		what, body, want, name string
		f                      func([]byte) *schema.Error
	}{
		{"quota without tenant", `{"leases":1}`, "tenant is required", "", quotaOf(d)},
		{"quota of the default tenant", `{"tenant":""}`, "tenant is required", "", quotaOf(d)},
		{"quota of a dotted name", `{"tenant":"a.b"}`, "not a NATS account name", "", quotaOf(d)},
		{"negative quota", `{"tenant":"A","keys":-1}`, "keys must be from 0", "", quotaOf(d)},
		{"clear with a quota", `{"tenant":"A","clear":true,"leases":3}`, "give no leases with it", "", quotaOf(d)},
		{"tenants of a bad name", `{"tenant":"a*"}`, "not a NATS account name", "", func(b []byte) *schema.Error { _, e := d.Tenants(b); return e }},
		{"move of no tenant", `{"phase":"fence","to":"c2"}`, "not a NATS account name", "", moveOf(d)},
		{"unknown phase", `{"tenant":"A","phase":"jump"}`, "phase must be", "", moveOf(d)},
		{"fence without to", `{"tenant":"A","phase":"fence"}`, "to must name", "", moveOf(d)},
		{"fence to a wildcard", `{"tenant":"A","phase":"fence","to":"c.*"}`, "to must name", "", moveOf(d)},
		{"to outside the fence", `{"tenant":"A","phase":"finish","to":"c2"}`, "to belongs to the fence", "", moveOf(d)},
		{"chunk outside an import", `{"tenant":"A","phase":"activate","keys":[{"key":"k","value":1,"version":1}]}`, "belong to an import", "", moveOf(d)},
		{"counter outside the activation", `{"tenant":"A","phase":"import","next_lease_id":3}`, "belongs to the activation", "", moveOf(d)},
		{"bad lease", `{"tenant":"A","phase":"import","leases":[{"id":0,"ttl":1,"remaining_ms":0}]}`, "leases[0]", "", moveOf(d)},
		{"bad key", `{"tenant":"A","phase":"import","keys":[{"key":"a b","value":1,"version":1}]}`, "keys[0].key", "", moveOf(d)},
		{"large value", `{"tenant":"A","phase":"import","keys":[{"key":"k","value":"` + strings.Repeat("x", 20) + `","version":1}]}`, "keys[0].value is 22 bytes", schema.ErrTooLarge, moveOf(d)},
		{"metadata not an object", `{"tenant":"A","phase":"import","keys":[{"key":"k","value":1,"version":1,"metadata":[1]}]}`, "keys[0].metadata must be a JSON object", "", moveOf(d)},
		{"bad hash", `{"tenant":"A","phase":"import","idempotency":[{"key":"r","hash":"00","reply":{}}]}`, "idempotency[0].hash", "", moveOf(d)},
		{"a lease twice", `{"tenant":"A","phase":"import","leases":[{"id":3,"ttl":1,"remaining_ms":0},{"id":3,"ttl":2,"remaining_ms":0}]}`, "lease 3 of the chunk is malformed or named twice", "", moveOf(d)},
		{"a key twice", `{"tenant":"A","phase":"import","keys":[{"key":"k","value":1,"version":1},{"key":"k","value":2,"version":1}]}`, `key "k" of the chunk is malformed or named twice`, "", moveOf(d)},
		{"an idempotency key twice", `{"tenant":"A","phase":"import","idempotency":[{"key":"r","hash":"` + strings.Repeat("0a", 32) + `","reply":{}},{"key":"r","hash":"` + strings.Repeat("0b", 32) + `","reply":{}}]}`, `idempotency key "r" of the chunk`, "", moveOf(d)},
		{"export section", `{"tenant":"A","section":"values"}`, "section must be", "", exportOf(d)},
		{"export limit", `{"tenant":"A","section":"keys","limit":10001}`, "limit must be from 1 to 10000", "", exportOf(d)},
	} {
		e := c.f([]byte(c.body))
		want := c.name
		if want == "" {
			want = schema.ErrInvalidRequest
		}
		if e == nil || e.Name != want || !strings.Contains(e.Description, c.want) {
			t.Errorf("%s: %v, want %s saying %q", c.what, e, want, c.want)
		}
	}
}

func quotaOf(d Decoder) func([]byte) *schema.Error {
	return func(b []byte) *schema.Error { _, e := d.Quota(b); return e }
}

func moveOf(d Decoder) func([]byte) *schema.Error {
	return func(b []byte) *schema.Error { _, e := d.TenantMove(b); return e }
}

func exportOf(d Decoder) func([]byte) *schema.Error {
	return func(b []byte) *schema.Error { _, e := d.TenantExport(b); return e }
}
