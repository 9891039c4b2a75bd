package fsm

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// goldenCommands holds, for one command of every op (and a few shapes that
// take other branches of the encoding), the entry EncodeKeyed writes with
// and without an idempotency key, and the hash the idempotency cache keeps
// (which snapshots carry). It was written by the encoder before the
// command table existed; the log format may not move a byte from it.
const goldenCommands = "testdata/commands-v1.golden"

// goldenKey is the idempotency key of the keyed entries in goldenCommands.
const goldenKey = "n1:req-1842"

// goldenCommandCases are the bodies behind goldenCommands, by name.
func goldenCommandCases() []struct {
	name string
	body any
} {
	return []struct {
		name string
		body any
	}{
		{"grant", &Grant{ID: 42, TTL: 30, Metadata: val(`{"owner":"n1","tags":["a","<&>"]}`)}},
		{"grant-next-id", &Grant{TTL: 5}},
		{"keepalive", &KeepAlive{ID: 42, TTL: 60}},
		{"keepalive-same-ttl", &KeepAlive{ID: MaxLeaseID}},
		{"revoke", &Revoke{ID: 1 << 40}},
		{"compact", &Compact{Revision: 123_456}},
		{"set_quota", &SetQuota{Tenant: "TENANT_A", Quota: Quota{Leases: 100, Keys: 1000, ValueBytes: 1 << 20, KeepAliveMany: 50, RequestsPerSecond: 200}}},
		{"set_quota_clear", &SetQuota{Tenant: QuotaDefault, Clear: true}},
		{"tenant_move_fence", &TenantMove{Tenant: "TENANT_A", Phase: MoveFence, To: "c2"}},
		{"tenant_move_import", &TenantMove{Tenant: "TENANT_A", Phase: MoveImport,
			Leases:      []MovedLease{{ID: 7, TTL: 10, RemainingMS: 6500, Anonymous: true, Metadata: val(`{"o":1}`)}},
			Keys:        []MovedKey{{Key: "svc.a", Value: val(`{"addr":"10.0.0.5"}`), Version: 3, Lease: 7, ContentType: "application/json", Metadata: val(`{"m":2}`)}},
			Idempotency: []MovedIdem{{Key: "req-1", Hash: [32]byte{1, 2, 3}, Reply: val(`{"id":7}`)}}}},
		{"tenant_move_activate", &TenantMove{Tenant: "TENANT_A", Phase: MoveActivate, NextLeaseID: 42}},
		{"put-extra", &Put{Key: "config.db", Value: val(`{"host":"db1"}`), PrevKV: true, ContentType: "application/json", Metadata: val(`{"owner":"ops"}`)}},
		{"put-content-type-only", &Put{Key: "k", Value: val(`1`), ContentType: "text/plain"}},
		{"txn-put-extra", &Txn{Success: []TxnOp{{Put: &Put{Key: "a", Value: val(`1`), Metadata: val(`{"m":1}`)}}, {Put: &Put{Key: "b", Value: val(`2`)}}}}},
		{"delete-range", &Delete{Key: "svc.a", IsRange: true, RangeEnd: "svc.m", PrevKV: true}},
		{"delete-range-to-end", &Delete{Key: "z", IsRange: true}},
		{"put", &Put{Key: "svc/a.é", Value: val(`{"x":"<&>","n":[1,2.5,null]}`), Lease: 42, PrevKV: true}},
		{"put-ttl", &Put{Key: "b", Value: val(`"v"`), TTL: 30}},
		{"delete", &Delete{Key: "a"}},
		{"delete-prefix", &Delete{Key: "p.", IsPrefix: true, PrevKV: true, Limit: 1000}},
		{"expire", &Expire{IDs: []int64{3, 42, -1}}},
		{"expire-tick", &Expire{}},
		{"set_limits", &Limits{MaxLeases: 100_000, MaxKeysPerLease: 10_000, IdempotencyEntries: 7, IdempotencyRevisions: 1 << 33,
			HistoryRevisions: 1_000_000, HistoryAgeMS: 24 * 3600 * 1000}},
		{"txn", txnShapes()[4]},
		{"txn-empty", &Txn{}},
		{"keepalive_many", &KeepAliveMany{IDs: []int64{1, 42, 1 << 53, 42}}},
		{"keepalive_many-none", &KeepAliveMany{}},
	}
}

// goldenCommandLines encodes every case: "<name> <hex>" for the plain
// entry, "<name>+key <hex>" for the keyed one, "<name>#hash <hex>" for the
// idempotency hash.
func goldenCommandLines(t *testing.T) [][2]string {
	t.Helper()
	const now = int64(1_700_000_000_123)
	var lines [][2]string
	for _, c := range goldenCommandCases() {
		plain := encode(t, now, c.body)
		keyed := encode(t, now, Command{IdempotencyKey: goldenKey, Body: c.body})
		hash, err := bodyHash(c.body)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines,
			[2]string{c.name, hex.EncodeToString(plain)},
			[2]string{c.name + "+key", hex.EncodeToString(keyed)},
			[2]string{c.name + "#hash", hex.EncodeToString(hash[:])})
	}
	return lines
}

// readGoldenCommands parses goldenCommands into name -> hex, in file order.
func readGoldenCommands(t *testing.T) (names []string, byName map[string]string) {
	t.Helper()
	f, err := os.Open(goldenCommands)
	if err != nil {
		t.Fatalf("%v (run go test ./fsm -run TestCommandEncodingGolden -update to create it)", err)
	}
	defer f.Close()
	byName = map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, h, ok := strings.Cut(line, " ")
		if !ok || byName[name] != "" {
			t.Fatalf("%s: bad or repeated line %q", goldenCommands, line)
		}
		names = append(names, name)
		byName[name] = h
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names, byName
}

// Every op encodes byte for byte as the golden file says, with and without
// an idempotency key, and hashes for the idempotency cache as it did; the
// golden entries decode to the bodies they were written from. -update only
// adds lines for new cases: it refuses to change a line already there,
// since that would change the log format.
func TestCommandEncodingGolden(t *testing.T) {
	got := goldenCommandLines(t)
	if *update {
		var have map[string]string
		if _, err := os.Stat(goldenCommands); err == nil {
			_, have = readGoldenCommands(t)
		}
		var out bytes.Buffer
		out.WriteString("# Log entries of every op, written by TestCommandEncodingGolden: never change a line.\n")
		for _, l := range got {
			if h, ok := have[l[0]]; ok && h != l[1] {
				t.Fatalf("-update would change %s in %s: the log format moved", l[0], goldenCommands)
			}
			fmt.Fprintf(&out, "%s %s\n", l[0], l[1])
		}
		if err := os.WriteFile(goldenCommands, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", goldenCommands)
	}
	names, want := readGoldenCommands(t)
	gotNames := make([]string, 0, len(got))
	for _, l := range got {
		gotNames = append(gotNames, l[0])
		if w, ok := want[l[0]]; !ok {
			t.Errorf("%s: no golden line (run with -update to add it)", l[0])
		} else if w != l[1] {
			t.Errorf("%s: encoding differs from %s:\ngot  %s\nwant %s", l[0], goldenCommands, l[1], w)
		}
	}
	if !slices.Equal(names, gotNames) {
		t.Errorf("golden lines %v, cases %v", names, gotNames)
	}

	// The golden entries decode to their bodies, keyed or not.
	seen := map[Op]bool{}
	for _, c := range goldenCommandCases() {
		op := opOf(c.body)
		seen[op] = true
		for _, suffix := range []string{"", "+key"} {
			data, err := hex.DecodeString(want[c.name+suffix])
			if err != nil {
				t.Fatalf("%s%s: %v", c.name, suffix, err)
			}
			cmd, err := Decode(data)
			if err != nil {
				t.Fatalf("%s%s: %v", c.name, suffix, err)
			}
			wantCmd := Command{Op: op, Now: 1_700_000_000_123, Body: c.body}
			if suffix != "" {
				wantCmd.IdempotencyKey = goldenKey
			}
			if !reflect.DeepEqual(cmd, wantCmd) {
				t.Errorf("%s%s decodes to %+v (%+v), want %+v", c.name, suffix, cmd, cmd.Body, c.body)
			}
		}
	}
	// One case at least for every op of the log format.
	for name, op := range declaredOps(t) {
		if !seen[op] {
			t.Errorf("no golden case for %s", name)
		}
	}
}

// declaredOps reads the package's source for every constant of type Op,
// so that an Op added without a table entry fails TestOpTable. Every such
// constant must be written `Name Op = <number>`.
func declaredOps(t *testing.T) map[string]Op {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]Op{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			typed := false // an untyped spec after a typed one repeats its type
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if vs.Type != nil {
					id, ok := vs.Type.(*ast.Ident)
					typed = ok && id.Name == "Op"
				} else if len(vs.Values) > 0 {
					typed = false
				}
				if !typed {
					continue
				}
				if len(vs.Names) != 1 || len(vs.Values) != 1 {
					t.Fatalf("%s: write each Op constant as `Name Op = <number>`", fset.Position(vs.Pos()))
				}
				var n uint64
				lit, ok := vs.Values[0].(*ast.BasicLit)
				if ok && lit.Kind == token.INT {
					n, err = strconv.ParseUint(lit.Value, 0, 8)
				}
				if !ok || lit.Kind != token.INT || err != nil {
					t.Fatalf("%s: %s is not a number from 0 to 255", fset.Position(vs.Pos()), vs.Names[0].Name)
				}
				found[vs.Names[0].Name] = Op(n)
			}
		}
	}
	return found
}

// Every declared Op has a complete table entry, with a name and a body
// type of its own, and the table has no entry without an Op; numbers out
// of the table are no command.
func TestOpTable(t *testing.T) {
	declared := declaredOps(t)
	if len(declared) == 0 {
		t.Fatal("found no Op constants")
	}
	byNumber := map[Op]string{}
	for name, op := range declared {
		if other, ok := byNumber[op]; ok {
			t.Errorf("%s and %s are both op %d", name, other, op)
		}
		byNumber[op] = name
		s := op.spec()
		switch {
		case s == nil:
			t.Errorf("%s (%d) has no entry in ops", name, op)
		case s.name == "" || s.encode == nil || s.decode == nil || s.apply == nil:
			t.Errorf("%s: incomplete entry %+v", name, *s)
		case s.keys != keyRemembered && s.keys != keyIgnored:
			t.Errorf("%s: entry does not say what an idempotency key does", name)
		case s.body.Kind() != reflect.Pointer || s.body.Elem().Kind() != reflect.Struct:
			t.Errorf("%s: body type %v is not a pointer to a struct", name, s.body)
		}
	}
	names := map[string]Op{}
	for i := range ops {
		op := Op(i)
		s := op.spec()
		if s == nil {
			eq(t, "name of a number without entry", op.String(), fmt.Sprintf("op(%d)", i))
			continue
		}
		if _, ok := byNumber[op]; !ok {
			t.Errorf("ops has entry %d (%s) but no Op constant is %d", i, s.name, i)
		}
		if other, ok := names[s.name]; ok {
			t.Errorf("ops %d and %d are both named %q", other, op, s.name)
		}
		names[s.name] = op
		eq(t, "String", op.String(), s.name)
		if got, ok := opOfBody(reflect.New(s.body.Elem()).Interface()); !ok || got != op {
			t.Errorf("the body %v of %s finds op %d, %v", s.body, s.name, got, ok)
		}
		// The decoder makes the body type the encoder takes.
		if got, _ := s.decode(decoder{}); reflect.TypeOf(got) != s.body {
			t.Errorf("%s decodes a %T, want %v", s.name, got, s.body)
		}
	}
	eq(t, "body types", len(opByBody), len(names))
	for _, op := range []Op{0, Op(len(ops)), 255} {
		if op.spec() != nil || mutates(op) {
			t.Errorf("op %d is a command", op)
		}
		eq(t, "name", op.String(), fmt.Sprintf("op(%d)", op))
	}
	if _, ok := opOfBody(Grant{}); ok {
		t.Error("a Grant value, not a pointer, found an op")
	}
}

// Idempotency keys cover exactly the client requests (a tenant's move
// steps among them: its tool retries a step whose outcome it did not
// learn); the leader's own commands ignore them.
func TestOpsIdempotencyKeys(t *testing.T) {
	remembered := map[Op]bool{OpGrant: true, OpKeepAlive: true, OpKeepAliveMany: true, OpRevoke: true,
		OpPut: true, OpDelete: true, OpTxn: true, OpCompact: true, OpTenantMove: true}
	for _, op := range declaredOps(t) {
		eq(t, op.String()+" remembers keys", mutates(op), remembered[op])
	}
}
