package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// The plain key calls build the same requests as the typed ones: options
// set the lease or ttl, a missing key is ErrKeyNotFound for GetKey only,
// and what the server refuses comes back as its sentinel.
func TestPlainKeyCalls(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	g, err := c.Grant(ctx, schema.LeaseGrantRequest{TTL: 30})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := c.PutKey(ctx, "t.plain.a", json.RawMessage(`"v1"`), client.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	kv, err := c.GetKey(ctx, "t.plain.a")
	if err != nil || kv.Key != "t.plain.a" || string(kv.Value) != `"v1"` || kv.Lease != g.ID {
		t.Fatalf("GetKey after a put with a lease: %v %+v", err, kv)
	}
	// Without options the key is detached from its lease.
	if _, err := c.PutKey(ctx, "t.plain.a", json.RawMessage(`"v2"`)); err != nil {
		t.Fatal(err)
	}
	if kv, err := c.GetKey(ctx, "t.plain.a"); err != nil || kv.Lease != 0 || kv.Version != 2 {
		t.Fatalf("GetKey after a plain put: %v %+v", err, kv)
	}

	// WithTTL rounds up to whole seconds: the key lives at least that long.
	if _, err := c.PutKey(ctx, "t.plain.b", json.RawMessage(`1`), client.WithTTL(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	kv, err = c.GetKey(ctx, "t.plain.b")
	if err != nil || kv.Lease == 0 {
		t.Fatalf("GetKey of a key with a ttl: %v %+v", err, kv)
	}
	info, err := c.LeaseInfo(ctx, schema.LeaseInfoRequest{ID: kv.Lease})
	if err != nil || info.TTL != 2 || !info.Anonymous {
		t.Fatalf("the lease of a put WithTTL(1.5s): %v %+v", err, info)
	}

	p, err := c.GetPrefix(ctx, "t.plain.")
	if err != nil || p.Count != 2 || len(p.KVs) != 2 || p.KVs[0].Key != "t.plain.a" || p.KVs[1].Key != "t.plain.b" || p.More {
		t.Fatalf("GetPrefix: %v %+v", err, p)
	}

	// Deleting a missing key is no error; reading it is ErrKeyNotFound.
	if d, err := c.DeleteKey(ctx, "t.plain.missing"); err != nil || d.Deleted != 0 {
		t.Fatalf("DeleteKey of a missing key: %v %+v", err, d)
	}
	if _, err := c.GetKey(ctx, "t.plain.missing"); !errors.Is(err, client.ErrKeyNotFound) {
		t.Fatalf("GetKey of a missing key: %v", err)
	}
	if d, err := c.DeleteKey(ctx, "t.plain.a"); err != nil || d.Deleted != 1 {
		t.Fatalf("DeleteKey: %v %+v", err, d)
	}
	if d, err := c.DeletePrefix(ctx, "t.plain."); err != nil || d.Deleted != 1 {
		t.Fatalf("DeletePrefix: %v %+v", err, d)
	}
	if p, err := c.GetPrefix(ctx, "t.plain."); err != nil || len(p.KVs) != 0 {
		t.Fatalf("GetPrefix after DeletePrefix: %v %+v", err, p)
	}

	// What the server refuses, and changes nothing.
	before, err := c.GetPrefix(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want error // nil: any error (one the client finds before sending)
	}{
		{"GetKey of a bad key", func() error { _, err := c.GetKey(ctx, "bad key"); return err }, client.ErrInvalidRequest},
		{"DeleteKey of a bad key", func() error { _, err := c.DeleteKey(ctx, "a.>"); return err }, client.ErrInvalidRequest},
		{"DeletePrefix of .a", func() error { _, err := c.DeletePrefix(ctx, ".a"); return err }, client.ErrInvalidRequest},
		{"PutKey with a lease and a ttl", func() error {
			_, err := c.PutKey(ctx, "t.plain.c", json.RawMessage(`1`), client.WithLease(g.ID), client.WithTTL(time.Second))
			return err
		}, client.ErrInvalidRequest},
		{"PutKey WithTTL(0)", func() error {
			_, err := c.PutKey(ctx, "t.plain.c", json.RawMessage(`1`), client.WithTTL(0))
			return err
		}, client.ErrInvalidRequest},
		{"PutKey with an unknown lease", func() error {
			_, err := c.PutKey(ctx, "t.plain.c", json.RawMessage(`1`), client.WithLease(987654321))
			return err
		}, client.ErrLeaseNotFound},
		{"PutKey of a value that is not JSON", func() error { _, err := c.PutKey(ctx, "t.plain.c", json.RawMessage(`{`)); return err }, nil},
	} {
		err := tc.call()
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) || errors.Is(err, client.ErrKeyNotFound) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	after, err := c.GetPrefix(ctx, "")
	if err != nil || after.Revision != before.Revision || after.Count != before.Count {
		t.Fatalf("refused calls changed the state: revision %d -> %d, %d -> %d keys (%v)", before.Revision, after.Revision, before.Count, after.Count, err)
	}
}
