package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// The get-at-revision workload (issue 15's scale bar: a read at a revision
// --rev-back revisions old, of one key and of a page of a prefix, against
// the same read at the present revision).
//
// Setup: --rev-keys keys under a prefix of their own, then --rev-writes
// more puts that go round the first --rev-page keys (the page), so that
// every key of the page has many versions, some older and some newer than
// the past revision. Every revision a put got is recorded, so each reply
// is checked against the mod_revision and version the key had at the
// revision asked: the past reads must come from the history, not from the
// live keys.
//
// Measurement: four reads, each a closed loop of every client, in
// --rev-rounds rounds; each read gets --duration in all, a round's share
// of it per round, and which of present and past goes first alternates
// from round to round, so both meet the same machine.

// revLeaseTTL is the ttl of the leases that hold the workload's keys: long
// enough for any run, so that a run that is killed leaves nothing behind
// for long; a run that ends revokes them.
const revLeaseTTL = 3600

// revKeysPerLease is how many of the keys one lease holds: the server's
// default limit of keys per lease.
const revKeysPerLease = schema.DefaultMaxKeysPerLease

// The four reads of get-at-revision, in the order of an odd round; an even
// round swaps present and past.
const (
	revKeyNow   = "rev-key-now"
	revKeyPast  = "rev-key-past"
	revPageNow  = "rev-page-now"
	revPagePast = "rev-page-past"
)

// revBench is the state of one get-at-revision run.
type revBench struct {
	b      *bencher
	prefix string
	leases []int64
	// revs[k] holds, in ascending order, the revisions at which page key k
	// was written: the load's, then each rewrite's.
	revs    [][]int64
	present int64
	past    int64
}

func (r *revBench) key(k int) string { return fmt.Sprintf("%s%08d", r.prefix, k) }

// at returns the mod_revision and version page key k had right after rev
// (its first write is version 1).
func (r *revBench) at(k int, rev int64) (modRev, version int64) {
	n := sort.Search(len(r.revs[k]), func(i int) bool { return r.revs[k][i] > rev })
	if n == 0 {
		return 0, 0
	}
	return r.revs[k][n-1], int64(n)
}

// check compares records with page keys first.. as they stood at rev.
func (r *revBench) check(kvs []schema.KeyValue, first int, rev int64) error {
	for j := range kvs {
		k := first + j
		want, version := r.at(k, rev)
		if kvs[j].Key != r.key(k) || kvs[j].ModRevision != want || kvs[j].Version != version {
			return fmt.Errorf("record %d at revision %d: %s mod_revision %d version %d, want %s mod_revision %d version %d",
				j, rev, kvs[j].Key, kvs[j].ModRevision, kvs[j].Version, r.key(k), want, version)
		}
	}
	return nil
}

// getAtRevision sets up, measures and returns the four reads' results in
// the order rev-key-now, rev-key-past, rev-page-now, rev-page-past, and
// the lines that the table prints under them: what was measured, and past
// ÷ present.
func (b *bencher) getAtRevision() ([]benchResult, string, error) {
	c := b.cfg
	r := &revBench{b: b, prefix: fmt.Sprintf("bench.%s.rev.", b.run), revs: make([][]int64, c.revPage)}
	defer r.revoke()
	if err := r.setup(); err != nil {
		return nil, "", fmt.Errorf("setup: %w", err)
	}
	ops := map[string][]benchOp{}
	for _, w := range []string{revKeyNow, revKeyPast, revPageNow, revPagePast} {
		ops[w] = make([]benchOp, len(b.conns))
		for i, nc := range b.conns {
			ops[w][i] = r.op(w, i, nc)
		}
	}
	window := c.duration / time.Duration(c.revRounds)
	loops := map[string]*loopResult{}
	for round := 1; round <= c.revRounds; round++ {
		order := []string{revKeyNow, revKeyPast, revPageNow, revPagePast}
		if round%2 == 0 {
			order = []string{revKeyPast, revKeyNow, revPagePast, revPageNow}
		}
		for _, w := range order {
			lr := runLoop(ops[w], window)
			acc := loops[w]
			if acc == nil {
				acc = &loopResult{}
				loops[w] = acc
			}
			acc.lat = append(acc.lat, lr.lat...)
			acc.elapsed += lr.elapsed
			acc.errs += lr.errs
			if acc.firstErr == nil && lr.firstErr != nil {
				acc.firstErr = fmt.Errorf("round %d: %w", round, lr.firstErr)
			}
		}
	}

	changed := 0
	for k := range r.revs {
		if mod, _ := r.at(k, r.present); mod > r.past {
			changed++
		}
	}
	var res []benchResult
	for _, w := range []string{revKeyNow, revKeyPast, revPageNow, revPagePast} {
		lr := loops[w]
		s := summarize(w, lr.lat, lr.elapsed)
		s.Errors = lr.errs
		if lr.firstErr != nil {
			fmt.Fprintf(os.Stderr, "concord bench: get-at-revision %s: %d failed requests; the first: %v\n", w, lr.errs, lr.firstErr)
		}
		rev := r.present
		if w == revKeyPast || w == revPagePast {
			rev = r.past
		}
		s.Extra = map[string]float64{"revision": float64(rev), "rounds": float64(c.revRounds)}
		if w == revPageNow || w == revPagePast {
			s.Extra["page"] = float64(c.revPage)
		}
		res = append(res, s)
	}
	for _, i := range []int{1, 3} {
		past, now := &res[i], res[i-1]
		past.Extra["back"] = float64(r.present - r.past)
		past.Extra["changed_since"] = float64(changed)
		if now.P50ms > 0 && now.P99ms > 0 && past.OpsPerS > 0 {
			past.Extra["p50_past_over_now"] = past.P50ms / now.P50ms
			past.Extra["p99_past_over_now"] = past.P99ms / now.P99ms
			past.Extra["ops_now_over_past"] = now.OpsPerS / past.OpsPerS
		}
	}
	var notes strings.Builder
	r.describe(&notes, res, changed)
	return res, notes.String(), nil
}

// describe says, under the table's rows, exactly what get-at-revision
// measured, and past ÷ present.
func (r *revBench) describe(w io.Writer, res []benchResult, changed int) {
	c := r.b.cfg
	fmt.Fprintf(w, "  get-at-revision: %d keys under %s (%d-byte values), then %d puts round the first %d of them;\n",
		c.revKeys, r.prefix, c.valueBytes, c.revWrites, c.revPage)
	fmt.Fprintf(w, "    present revision %d, past revision %d (%d back); %d of the %d page keys were written after the past revision.\n",
		r.present, r.past, r.present-r.past, changed, c.revPage)
	fmt.Fprintf(w, "    rev-key-*: a linearizable get of one of the %d page keys (in turn); rev-page-*: a linearizable get of the prefix\n"+
		"    with limit %d (its first %d keys); *-now at the present, *-past with \"revision\": %d. Every reply checked\n"+
		"    against the mod_revision and version each key had then. %d rounds of %s per read, present and past\n"+
		"    alternating which goes first; %d clients, closed loop.\n",
		c.revPage, c.revPage, c.revPage, r.past, c.revRounds, (c.duration / time.Duration(c.revRounds)).Round(time.Millisecond), c.clients)
	for _, i := range []int{1, 3} {
		what := "one key"
		if i == 3 {
			what = fmt.Sprintf("a %d-key page", c.revPage)
		}
		p, n := res[i], res[i-1]
		if n.P50ms == 0 || n.P99ms == 0 || p.OpsPerS == 0 {
			fmt.Fprintf(w, "    %s: no ratio (a read had no answers)\n", what)
			continue
		}
		fmt.Fprintf(w, "    %s, past ÷ present: p50 %.2f, p99 %.2f; ops/s present ÷ past %.2f\n",
			what, p.P50ms/n.P50ms, p.P99ms/n.P99ms, n.OpsPerS/p.OpsPerS)
	}
}

// setup writes the keys on leases of their own, then the rewrites, and
// fixes the present and the past revision.
func (r *revBench) setup() error {
	b, c := r.b, r.b.cfg
	value := b.value()
	for k := 0; k < c.revKeys; k += revKeysPerLease {
		id, err := b.grant(b.conns[0], revLeaseTTL)
		if err != nil {
			return err
		}
		r.leases = append(r.leases, id)
	}
	put := func(nc *nats.Conn, k int) (int64, error) {
		key, lease := r.key(k), r.leases[k/revKeysPerLease]
		var p schema.KVPutReply
		if err := call(nc, b.names.Request(subjects.KVPut), schema.KVPutRequest{Key: key, Value: value, Lease: &lease}, &p); err != nil {
			return 0, fmt.Errorf("put %s: %w", key, err)
		}
		if p.Revision <= 0 {
			return 0, fmt.Errorf("put %s: reply has revision %d", key, p.Revision)
		}
		return p.Revision, nil
	}
	loadRevs := make([]int64, c.revPage)
	err := b.spread(c.revKeys, func(nc *nats.Conn, k int) error {
		rev, err := put(nc, k)
		if k < c.revPage {
			loadRevs[k] = rev
		}
		return err
	})
	if err != nil {
		return err
	}
	rewriteRevs := make([]int64, c.revWrites)
	err = b.spread(c.revWrites, func(nc *nats.Conn, j int) error {
		rev, err := put(nc, j%c.revPage)
		rewriteRevs[j] = rev
		return err
	})
	if err != nil {
		return err
	}
	for k := range r.revs {
		r.revs[k] = []int64{loadRevs[k]}
	}
	for j, rev := range rewriteRevs {
		r.revs[j%c.revPage] = append(r.revs[j%c.revPage], rev)
	}
	for k := range r.revs {
		sort.Slice(r.revs[k], func(a, b int) bool { return r.revs[k][a] < r.revs[k][b] })
	}
	key := r.key(0)
	var g schema.KVGetReply
	if err := call(b.conns[0], b.names.Request(subjects.KVGet), schema.KVGetRequest{Key: &key}, &g); err != nil {
		return err
	}
	r.present = g.Revision
	r.past = r.present - int64(c.revBack)
	return r.check(g.KVs, 0, r.present)
}

// op returns client i's request for read w.
func (r *revBench) op(w string, i int, nc *nats.Conn) benchOp {
	c := r.b.cfg
	subject := r.b.names.Request(subjects.KVGet)
	rev := r.present
	var asked int64 // the request's revision: 0 is the present
	if w == revKeyPast || w == revPagePast {
		rev, asked = r.past, r.past
	}
	if w == revKeyNow || w == revKeyPast {
		return func(n int) (int, error) {
			k := (i + n*len(r.b.conns)) % c.revPage
			key := r.key(k)
			var g schema.KVGetReply
			if err := call(nc, subject, schema.KVGetRequest{Key: &key, Revision: asked}, &g); err != nil {
				return 0, err
			}
			if len(g.KVs) != 1 {
				return 0, fmt.Errorf("%s %s at revision %d: reply has %d records, want the key", subject, key, asked, len(g.KVs))
			}
			return 0, r.check(g.KVs, k, rev)
		}
	}
	prefix := r.prefix
	return func(int) (int, error) {
		var g schema.KVGetReply
		if err := call(nc, subject, schema.KVGetRequest{Prefix: &prefix, Limit: c.revPage, Revision: asked}, &g); err != nil {
			return 0, err
		}
		if len(g.KVs) != c.revPage || g.Count != int64(c.revKeys) {
			return 0, fmt.Errorf("%s %s at revision %d: %d records of %d, want %d of %d", subject, prefix, asked, len(g.KVs), g.Count, c.revPage, c.revKeys)
		}
		return 0, r.check(g.KVs, 0, rev)
	}
}

// revoke revokes the workload's leases, and with them its keys.
func (r *revBench) revoke() {
	var failed []string
	for _, id := range r.leases {
		if err := call(r.b.conns[0], r.b.names.Request(subjects.LeaseRevoke), schema.LeaseRevokeRequest{ID: id}, nil); err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		fmt.Fprintf(os.Stderr, "concord bench: get-at-revision: %d of %d leases not revoked (they expire within %d s): %s\n",
			len(failed), len(r.leases), revLeaseTTL, strings.Join(failed, "; "))
	}
}
