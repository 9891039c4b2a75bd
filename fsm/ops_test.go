package fsm

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"slices"
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
		{"put", &Put{Key: "svc/a.é", Value: val(`{"x":"<&>","n":[1,2.5,null]}`), Lease: 42, PrevKV: true}},
		{"put-ttl", &Put{Key: "b", Value: val(`"v"`), TTL: 30}},
		{"delete", &Delete{Key: "a"}},
		{"delete-prefix", &Delete{Key: "p.", IsPrefix: true, PrevKV: true, Limit: 1000}},
		{"expire", &Expire{IDs: []int64{3, 42, -1}}},
		{"expire-tick", &Expire{}},
		{"set_limits", &Limits{MaxLeases: 100_000, MaxKeysPerLease: 10_000, IdempotencyEntries: 7, IdempotencyRevisions: 1 << 33,
			ChangesMax: 1_000_000, ChangesMaxAgeMS: 24 * 3600 * 1000}},
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
	for op := OpGrant; op <= OpKeepAliveMany; op++ {
		if !seen[op] {
			t.Errorf("no golden case for %v", op)
		}
	}
}
