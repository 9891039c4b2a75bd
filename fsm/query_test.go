package fsm

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
)

// queryState: lease 1 (ttl 10, granted at t0) holds svc.api.n1 and
// svc.api.n2; svc.db has an anonymous lease 2 (ttl 3, put at t0+1000);
// the rest are unleased. The clock stands at t0+1000; revision 7.
func queryState(t *testing.T) *State {
	s := New()
	run(t, s,
		step{t0, &Grant{TTL: 10, Metadata: val(`{"owner":"api"}`)}},
		step{t0, &Put{Key: "svc.api.n2", Value: val(`"v2"`), Lease: 1}},   // 1
		step{t0, &Put{Key: "svc.api.n1", Value: val(`"v1"`), Lease: 1}},   // 2
		step{t0, &Put{Key: "svc.api.n3", Value: val(`"v3"`)}},             // 3
		step{t0, &Put{Key: "a", Value: val(`{"top":true}`)}},              // 4
		step{t0 + 1_000, &Put{Key: "svc.db", Value: val(`"db"`), TTL: 3}}, // 5
		step{t0 + 1_000, &Put{Key: "svcx", Value: val(`"x"`)}},            // 6
		step{t0 + 1_000, &Put{Key: "svc.api.n3", Value: val(`"v3b"`)}},    // 7
	)
	return s
}

func TestGetSingle(t *testing.T) {
	s := queryState(t)
	now := s.Now()
	rep := s.Get(GetQuery{Key: "svc.api.n1"}, now)
	eq(t, "reply", *rep, schema.KVGetReply{Revision: 7, Count: 1, KVs: []schema.KeyValue{
		{Key: "svc.api.n1", Value: val(`"v1"`), CreateRevision: 2, ModRevision: 2, Version: 1, Lease: 1, RemainingMS: i64(9_000)}}})
	rep = s.Get(GetQuery{Key: "svc.api.n3"}, now)
	eq(t, "unleased", rep.KVs, []schema.KeyValue{{Key: "svc.api.n3", Value: val(`"v3b"`), CreateRevision: 3, ModRevision: 7, Version: 2}})

	// A missing key is an empty list, not an error; a key is not a prefix.
	for _, k := range []string{"nope", "svc", "svc.api", "svc.api.n"} {
		rep = s.Get(GetQuery{Key: k}, now)
		if rep.KVs == nil || len(rep.KVs) != 0 || rep.Count != 0 || rep.More || rep.Revision != 7 {
			t.Fatalf("Get(%q) = %+v, want an empty list", k, rep)
		}
	}
	// keys_only drops the value only; count_only drops the records.
	rep = s.Get(GetQuery{Key: "svc.db", KeysOnly: true}, now)
	eq(t, "keys_only", rep.KVs, []schema.KeyValue{{Key: "svc.db", CreateRevision: 5, ModRevision: 5, Version: 1, Lease: 2, RemainingMS: i64(3_000)}})
	rep = s.Get(GetQuery{Key: "svc.db", CountOnly: true}, now)
	eq(t, "count_only", *rep, schema.KVGetReply{Revision: 7, KVs: []schema.KeyValue{}, Count: 1})
}

func TestGetRemainingMS(t *testing.T) {
	s := queryState(t)
	cases := []struct {
		now        int64
		n1, db     int64
		unleasedOK bool
	}{
		{t0 + 1_000, 9_000, 3_000, true},
		{t0 + 3_999, 6_001, 1, true},
		{t0 + 4_000, 6_000, 0, true}, // at its deadline
		{t0 + 9_000, 1_000, 0, true}, // past its deadline, not yet expired: 0, not negative
		{t0 + 60_000, 0, 0, true},
	}
	for _, c := range cases {
		rep := s.Get(GetQuery{IsPrefix: true, Key: "svc.", Limit: 100}, c.now)
		got := map[string]*int64{}
		for _, kv := range rep.KVs {
			got[kv.Key] = kv.RemainingMS
		}
		if got["svc.api.n1"] == nil || *got["svc.api.n1"] != c.n1 || *got["svc.api.n2"] != c.n1 {
			t.Fatalf("at %d: n1 remaining %v, want %d", c.now, got["svc.api.n1"], c.n1)
		}
		if got["svc.db"] == nil || *got["svc.db"] != c.db {
			t.Fatalf("at %d: db remaining %v, want %d", c.now, got["svc.db"], c.db)
		}
		if got["svc.api.n3"] != nil {
			t.Fatalf("unleased key has remaining_ms %d", *got["svc.api.n3"])
		}
	}
}

func TestGetPrefix(t *testing.T) {
	s := queryState(t)
	now := s.Now()
	type q struct {
		name  string
		query GetQuery
		keys  []string
		count int64
		more  bool
	}
	for _, c := range []q{
		{"all", GetQuery{IsPrefix: true, Limit: 1000}, []string{"a", "svc.api.n1", "svc.api.n2", "svc.api.n3", "svc.db", "svcx"}, 6, false},
		{"subtree", GetQuery{IsPrefix: true, Key: "svc.", Limit: 1000}, []string{"svc.api.n1", "svc.api.n2", "svc.api.n3", "svc.db"}, 4, false},
		{"inside a token", GetQuery{IsPrefix: true, Key: "svc", Limit: 1000}, []string{"svc.api.n1", "svc.api.n2", "svc.api.n3", "svc.db", "svcx"}, 5, false},
		{"whole key as prefix", GetQuery{IsPrefix: true, Key: "svc.db", Limit: 1000}, []string{"svc.db"}, 1, false},
		{"no match", GetQuery{IsPrefix: true, Key: "b", Limit: 1000}, []string{}, 0, false},
		{"limit", GetQuery{IsPrefix: true, Key: "svc.", Limit: 2}, []string{"svc.api.n1", "svc.api.n2"}, 4, true},
		{"limit equal to the count", GetQuery{IsPrefix: true, Key: "svc.", Limit: 4}, []string{"svc.api.n1", "svc.api.n2", "svc.api.n3", "svc.db"}, 4, false},
		{"limit 1", GetQuery{IsPrefix: true, Limit: 1}, []string{"a"}, 6, true},
		{"after", GetQuery{IsPrefix: true, Key: "svc.", After: "svc.api.n2", Limit: 1000}, []string{"svc.api.n3", "svc.db"}, 2, false},
		{"after a key that does not exist", GetQuery{IsPrefix: true, Key: "svc.", After: "svc.api.n10", Limit: 1000}, []string{"svc.api.n2", "svc.api.n3", "svc.db"}, 3, false},
		{"after, with limit", GetQuery{IsPrefix: true, After: "a", Limit: 2}, []string{"svc.api.n1", "svc.api.n2"}, 5, true},
		{"after below the prefix", GetQuery{IsPrefix: true, Key: "svc.", After: "a", Limit: 1000}, []string{"svc.api.n1", "svc.api.n2", "svc.api.n3", "svc.db"}, 4, false},
		{"after the last key", GetQuery{IsPrefix: true, Key: "svc.", After: "svc.db", Limit: 1000}, []string{}, 0, false},
		{"after beyond the prefix", GetQuery{IsPrefix: true, Key: "svc.", After: "t", Limit: 1000}, []string{}, 0, false},
		{"count_only", GetQuery{IsPrefix: true, Key: "svc.", CountOnly: true, Limit: 1}, []string{}, 4, false},
		{"count_only after", GetQuery{IsPrefix: true, After: "svc.api.n3", CountOnly: true, Limit: 1000}, []string{}, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := s.Get(c.query, now)
			eq(t, "keys", keysOf(rep.KVs), c.keys)
			eq(t, "count", rep.Count, c.count)
			eq(t, "more", rep.More, c.more)
			eq(t, "revision", rep.Revision, int64(7))
			if rep.KVs == nil {
				t.Fatal("kvs is nil; the wire format wants []")
			}
			for _, kv := range rep.KVs {
				single := s.Get(GetQuery{Key: kv.Key}, now).KVs[0]
				eq(t, "record "+kv.Key, kv, single)
			}
		})
	}
}

func TestGetKeysOnly(t *testing.T) {
	s := queryState(t)
	rep := s.Get(GetQuery{IsPrefix: true, Key: "svc.api.", KeysOnly: true, Limit: 10}, s.Now())
	eq(t, "records", rep.KVs, []schema.KeyValue{
		{Key: "svc.api.n1", CreateRevision: 2, ModRevision: 2, Version: 1, Lease: 1, RemainingMS: i64(9_000)},
		{Key: "svc.api.n2", CreateRevision: 1, ModRevision: 1, Version: 1, Lease: 1, RemainingMS: i64(9_000)},
		{Key: "svc.api.n3", CreateRevision: 3, ModRevision: 7, Version: 2},
	})
}

// Paging with after + limit visits every key once, in order.
func TestGetPaging(t *testing.T) {
	s := New()
	var want []string
	for i := 0; i < 57; i++ {
		k := "p." + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + "." + string(rune('0'+i/26))
		mustApply(t, s, t0, &Put{Key: k, Value: val(`1`)})
	}
	mustApply(t, s, t0, &Put{Key: "q", Value: val(`1`)})
	want = keysOf(s.Get(GetQuery{IsPrefix: true, Key: "p.", Limit: 1000}, t0).KVs)
	eq(t, "total", len(want), 57)
	for _, limit := range []int{1, 2, 7, 56, 57, 58} {
		var got []string
		after := ""
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatal("paging does not end")
			}
			rep := s.Get(GetQuery{IsPrefix: true, Key: "p.", After: after, Limit: limit}, t0)
			if len(rep.KVs) == 0 && rep.More {
				t.Fatal("an empty page says more")
			}
			eq(t, "count", rep.Count, int64(len(want)-len(got)))
			got = append(got, keysOf(rep.KVs)...)
			if !rep.More {
				break
			}
			after = rep.KVs[len(rep.KVs)-1].Key
		}
		eq(t, "paged keys", got, want)
	}
}

func TestGetMaxBytes(t *testing.T) {
	s := New()
	big := `"` + strings.Repeat("b", 5000) + `"`
	run(t, s,
		step{t0, &Put{Key: "m.1", Value: val(`"v1"`)}},
		step{t0, &Put{Key: "m.2", Value: val(`"v2"`)}},
		step{t0, &Put{Key: "m.3", Value: val(`"v3"`)}},
		step{t0, &Put{Key: "n.big", Value: val(big)}},
		step{t0, &Put{Key: "n.small", Value: val(`1`)}},
	)
	small := 3 + recordOverhead + 4 // key "m.N", value "vN"
	for _, c := range []struct {
		name     string
		q        GetQuery
		keys     []string
		more     bool
		maxBytes int
	}{
		{"no bound", GetQuery{Key: "m.", Limit: 10}, []string{"m.1", "m.2", "m.3"}, false, 0},
		{"two fit exactly", GetQuery{Key: "m.", Limit: 10}, []string{"m.1", "m.2"}, true, 2 * small},
		{"one byte short of two", GetQuery{Key: "m.", Limit: 10}, []string{"m.1"}, true, 2*small - 1},
		{"all three fit", GetQuery{Key: "m.", Limit: 10}, []string{"m.1", "m.2", "m.3"}, false, 3 * small},
		{"a tiny bound still returns one record", GetQuery{Key: "m.", Limit: 10}, []string{"m.1"}, true, 1},
		{"one record larger than the bound", GetQuery{Key: "n.", Limit: 10}, []string{"n.big"}, true, 100},
		{"keys_only does not count values", GetQuery{Key: "m.", Limit: 10, KeysOnly: true}, []string{"m.1", "m.2"}, true, 2*small - 1},
		{"limit wins over bytes", GetQuery{Key: "m.", Limit: 1}, []string{"m.1"}, true, 10 * small},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := c.q
			q.IsPrefix = true
			q.MaxBytes = c.maxBytes
			rep := s.Get(q, t0)
			eq(t, "keys", keysOf(rep.KVs), c.keys)
			eq(t, "more", rep.More, c.more)
			eq(t, "count", rep.Count, map[string]int64{"m.": 3, "n.": 2}[c.q.Key])
		})
	}
}

func TestLeaseInfo(t *testing.T) {
	s := queryState(t)
	li, err := s.LeaseInfo(1, true, t0+1_500)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "info", *li, schema.LeaseInfo{ID: 1, TTL: 10, RemainingTTL: 8, RemainingMS: 8_500, GrantedRevision: 0,
		Metadata: val(`{"owner":"api"}`), KeyCount: 2, Keys: []string{"svc.api.n1", "svc.api.n2"}})
	li, _ = s.LeaseInfo(1, false, t0+1_500)
	if li.Keys != nil {
		t.Fatalf("keys without asking: %v", li.Keys)
	}
	eq(t, "key_count without keys", li.KeyCount, int64(2))
	li, _ = s.LeaseInfo(2, true, t0+3_999)
	eq(t, "anonymous", *li, schema.LeaseInfo{ID: 2, TTL: 3, RemainingTTL: 0, RemainingMS: 1, GrantedRevision: 5,
		Anonymous: true, Metadata: val(`{}`), KeyCount: 1, Keys: []string{"svc.db"}})
	li, _ = s.LeaseInfo(2, false, t0+99_000)
	eq(t, "past deadline", [2]int64{li.RemainingMS, li.RemainingTTL}, [2]int64{0, 0})
	for _, id := range []int64{0, 3, -1, math.MaxInt64} {
		if li, err := s.LeaseInfo(id, true, t0); !errors.Is(err, ErrLeaseNotFound) || li != nil {
			t.Fatalf("LeaseInfo(%d) = %v, %v", id, li, err)
		}
	}
	// Keys are sorted however they were attached.
	s = New()
	mustApply(t, s, t0, &Grant{TTL: 5})
	for _, k := range []string{"z", "m.b", "a", "m.a", "m", "b.z.z"} {
		mustApply(t, s, t0, &Put{Key: k, Value: val(`1`), Lease: 1})
	}
	eq(t, "sorted keys", info(t, s, 1).Keys, []string{"a", "b.z.z", "m", "m.a", "m.b", "z"})
}

func TestLeaseList(t *testing.T) {
	s := New()
	// Explicit leases 1,2,4,5,7,8; anonymous 3 and 6.
	run(t, s,
		step{t0, &Grant{TTL: 1}},
		step{t0, &Grant{TTL: 2}},
		step{t0, &Put{Key: "x", Value: val(`1`), TTL: 3}},
		step{t0, &Grant{TTL: 4}},
		step{t0, &Grant{TTL: 5}},
		step{t0, &Put{Key: "y", Value: val(`1`), TTL: 6}},
		step{t0, &Grant{TTL: 7}},
		step{t0, &Grant{TTL: 8}},
	)
	ids := func(r *schema.LeaseListReply) []int64 {
		out := []int64{}
		for _, l := range r.Leases {
			out = append(out, l.ID)
			if l.Keys != nil {
				t.Fatalf("list carries keys: %+v", l)
			}
		}
		return out
	}
	for _, c := range []struct {
		anon  bool
		after int64
		limit int
		want  []int64
		more  bool
	}{
		{false, 0, 100, []int64{1, 2, 4, 5, 7, 8}, false},
		{true, 0, 100, []int64{1, 2, 3, 4, 5, 6, 7, 8}, false},
		{false, 0, 3, []int64{1, 2, 4}, true},
		{true, 0, 3, []int64{1, 2, 3}, true},
		{false, 4, 2, []int64{5, 7}, true},
		{false, 5, 2, []int64{7, 8}, false},
		{false, 7, 1, []int64{8}, false},
		{true, 5, 1, []int64{6}, true},
		{false, 8, 10, []int64{}, false},
		{false, 100, 10, []int64{}, false},
		{false, 2, 6, []int64{4, 5, 7, 8}, false},
	} {
		rep := s.LeaseList(c.anon, c.after, c.limit, t0)
		if got := ids(rep); !equalIDs(got, c.want) || rep.More != c.more {
			t.Fatalf("LeaseList(anon %v, after %d, limit %d) = %v more %v, want %v more %v", c.anon, c.after, c.limit, got, rep.More, c.want, c.more)
		}
	}
	// When the only leases left are anonymous and hidden, there is no more.
	s2 := New()
	run(t, s2, step{t0, &Grant{TTL: 1}}, step{t0, &Grant{TTL: 1}}, step{t0, &Put{Key: "x", Value: val(`1`), TTL: 3}})
	rep := s2.LeaseList(false, 0, 2, t0)
	eq(t, "hidden tail", [2]any{ids(rep), rep.More}, [2]any{[]int64{1, 2}, false})

	// Paging visits every lease once, for every page size.
	for _, anon := range []bool{false, true} {
		all := ids(s.LeaseList(anon, 0, 1000, t0))
		for limit := 1; limit <= 9; limit++ {
			var got []int64
			after := int64(0)
			for {
				rep := s.LeaseList(anon, after, limit, t0)
				got = append(got, ids(rep)...)
				if !rep.More {
					break
				}
				after = rep.Leases[len(rep.Leases)-1].ID
			}
			eq(t, "paged", got, all)
		}
	}
	// The entries describe the leases as LeaseInfo does, at the given time.
	rep = s.LeaseList(true, 2, 1, t0+500)
	li, _ := s.LeaseInfo(3, false, t0+500)
	eq(t, "entry", rep.Leases[0], *li)
	eq(t, "anonymous entry", rep.Leases[0].Anonymous, true)
	eq(t, "remaining", rep.Leases[0].RemainingMS, int64(2_500))
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestExpiredAndNextDeadline(t *testing.T) {
	s := New()
	if _, ok := s.NextDeadline(); ok {
		t.Fatal("deadline on an empty state")
	}
	// Deadlines: 1 -> t0+3000, 2 -> t0+1000, 3 -> t0+2000, 4 -> t0+1000,
	// 5 (anonymous) -> t0+2000.
	run(t, s,
		step{t0, &Grant{TTL: 3}},
		step{t0, &Grant{TTL: 1}},
		step{t0, &Grant{TTL: 2}},
		step{t0, &Grant{TTL: 1}},
		step{t0, &Put{Key: "k", Value: val(`1`), TTL: 2}},
	)
	for _, c := range []struct {
		now  int64
		max  int
		want []int64
	}{
		{t0, 0, nil},
		{t0 + 1_000, 0, nil}, // equal to the deadline: not expired
		{t0 + 1_001, 0, []int64{2, 4}},
		{t0 + 2_000, 0, []int64{2, 4}},
		{t0 + 2_001, 0, []int64{2, 4, 3, 5}},
		{t0 + 3_001, 0, []int64{2, 4, 3, 5, 1}},
		{t0 + 3_001, 1, []int64{2}},
		{t0 + 3_001, 3, []int64{2, 4, 3}},
		{t0 + 3_001, 5, []int64{2, 4, 3, 5, 1}},
		{t0 + 3_001, 50, []int64{2, 4, 3, 5, 1}},
		{t0 + 1_001, 1, []int64{2}},
	} {
		eq(t, "Expired", s.Expired(c.now, c.max), c.want)
	}
	d, ok := s.NextDeadline()
	eq(t, "next deadline", [2]any{d, ok}, [2]any{int64(t0 + 1_000), true})

	// Keep-alives, revokes, expiries and detaches move the index.
	mustApply(t, s, t0+500, &KeepAlive{ID: 2})         // 2 -> t0+1500
	mustApply(t, s, t0+500, &KeepAlive{ID: 4, TTL: 3}) // 4 -> t0+3500
	eq(t, "after keep-alives", s.Expired(t0+3_600, 0), []int64{2, 3, 5, 1, 4})
	d, _ = s.NextDeadline()
	eq(t, "next", d, int64(t0+1_500))
	mustApply(t, s, t0+500, &Revoke{ID: 2})
	d, _ = s.NextDeadline()
	eq(t, "next after revoke", d, int64(t0+2_000))
	mustApply(t, s, t0+500, &Put{Key: "k", Value: val(`2`)}) // drops anonymous 5
	eq(t, "after detach", s.Expired(t0+3_600, 0), []int64{3, 1, 4})
	mustApply(t, s, t0+2_001, &Expire{IDs: s.Expired(t0+2_001, 0)})
	eq(t, "after expire", s.Expired(t0+3_600, 0), []int64{1, 4})
	d, _ = s.NextDeadline()
	eq(t, "next after expire", d, int64(t0+3_000))
	mustApply(t, s, t0+9_000, &Expire{IDs: s.Expired(t0+9_000, 0)})
	if d, ok := s.NextDeadline(); ok {
		t.Fatalf("deadline %d left after everything expired", d)
	}
}

// A prefix or range read calls its Yield after every YieldEvery records
// it walks (counted ones included), and answers as it would without.
func TestGetYields(t *testing.T) {
	s := New()
	mustApply(t, s, t0, benchLimits)
	const keys = 3*YieldEvery + 10
	for i := range keys {
		mustApply(t, s, t0, &Put{Key: fmt.Sprintf("k.%05d", i), Value: val(`1`)})
	}
	for _, q := range []GetQuery{
		{Key: "k.", IsPrefix: true, Limit: keys},
		{Key: "k.", IsPrefix: true, Limit: 10},
		{Key: "k.00100", IsRange: true, RangeEnd: "k.00700", Limit: keys, CountOnly: true},
	} {
		plain := s.Get(q, t0)
		yields := 0
		q.Yield = func() { yields++ }
		got := s.Get(q, t0)
		eq(t, "reply", got, plain)
		if want := int(plain.Count) / YieldEvery; yields != want {
			t.Errorf("%+v: %d yields for %d records walked, want %d", q, yields, plain.Count, want)
		}
	}
}
