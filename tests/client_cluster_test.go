package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cc "github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

func clusterClient(t *testing.T, urls ...string) *cc.Client {
	t.Helper()
	c, err := cc.Connect(cc.URL(strings.Join(urls, ",")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A session's keys survive a kill -9 of the leader, and the session never
// believes it lost its lease.
func TestSessionSurvivesLeaderKill(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 3)
	c := clusterClient(t, cl.urls...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.NewSession(ctx, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, schema.KVPutRequest{Key: "sess.me", Value: json.RawMessage(`"here"`), Lease: cc.Ptr(s.Lease())}); err != nil {
		t.Fatal(err)
	}
	cl.nodes[cl.leaderIndex(c.NATS())].kill()
	end := time.Now().Add(8 * time.Second)
	for time.Now().Before(end) {
		if st := s.State(); st == cc.Expired {
			t.Fatalf("the session expired across the failover")
		}
		select {
		case <-s.Done():
			t.Fatal("the session's Done closed across the failover")
		case <-time.After(100 * time.Millisecond):
		}
	}
	g, err := c.Get(ctx, schema.KVGetRequest{Key: cc.Ptr("sess.me")})
	if err != nil || len(g.KVs) != 1 {
		t.Fatalf("the session's key after the failover: %v %+v", err, g)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if g, _ := c.Get(ctx, schema.KVGetRequest{Key: cc.Ptr("sess.me")}); len(g.KVs) != 0 {
		t.Fatal("Close did not revoke the session's lease")
	}
}

// A watch from revision R delivers exactly what the change log holds after
// R, in order, across a kill -9 of the server the watcher is connected to
// and, later, of the leader.
func TestWatchMatchesChangeLogAcrossFailures(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 3)
	writer := clusterClient(t, cl.urls...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := cl.leaderIndex(writer.NATS())
	// The watcher connects to a follower's server first, which we also
	// kill, so it must reconnect.
	follower := (leader + 1) % 3
	urls := []string{cl.urls[follower], cl.urls[(leader+2)%3], cl.urls[leader]}
	watcher := clusterClient(t, urls...)
	g, err := writer.Get(ctx, schema.KVGetRequest{Prefix: cc.Ptr(""), CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	from := g.Revision
	w, err := watcher.Watch(ctx, "wl.", true, from)
	if err != nil {
		t.Fatal(err)
	}
	var got []schema.Event
	var mu sync.Mutex
	go func() {
		for e := range w.Events() {
			mu.Lock()
			got = append(got, e)
			mu.Unlock()
		}
	}()
	lease, err := writer.Grant(ctx, schema.LeaseGrantRequest{TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		key := fmt.Sprintf("wl.k%d", i%7)
		switch {
		case i%50 == 10:
			_, err = writer.Delete(ctx, schema.KVDeleteRequest{Prefix: cc.Ptr("wl.k")})
		case i%3 == 0:
			_, err = writer.Put(ctx, schema.KVPutRequest{Key: key, Value: json.RawMessage(fmt.Sprint(i)), Lease: cc.Ptr(lease.ID)})
		default:
			_, err = writer.Put(ctx, schema.KVPutRequest{Key: key, Value: json.RawMessage(fmt.Sprint(i))})
		}
		if err != nil {
			t.Fatal(err)
		}
		_, _ = writer.Put(ctx, schema.KVPutRequest{Key: "other.k", Value: json.RawMessage("1")}) // revisions outside the prefix
		switch i {
		case 100: // the watcher's server: it must reconnect elsewhere
			cl.nodes[follower].kill()
		case 150: // back, so the next kill leaves a majority
			cl.nodes[follower].restart()
			cl.waitMembers(3, 30*time.Second)
		case 200:
			cl.nodes[cl.leaderIndex(writer.NATS())].kill()
		}
	}
	if _, err := writer.Revoke(ctx, schema.LeaseRevokeRequest{ID: lease.ID}); err != nil {
		t.Fatal(err)
	}
	// The change log from R, read page by page.
	var want []schema.Event
	req := schema.KVChangesRequest{Prefix: cc.Ptr("wl."), AfterRevision: from}
	for {
		r, err := writer.Changes(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r.Events...)
		if !r.More {
			break
		}
		req.AfterRevision, req.AfterOpIndex = r.NextRevision, nil
		if r.NextOpIndex >= 0 {
			req.AfterOpIndex = cc.Ptr(r.NextOpIndex)
		}
	}
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < len(want) {
			return fmt.Errorf("watched %d of %d events", len(got), len(want))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("watched %d events, the change log holds %d", len(got), len(want))
	}
	for i := range want {
		a, _ := json.Marshal(got[i])
		b, _ := json.Marshal(want[i])
		if string(a) != string(b) {
			t.Fatalf("event %d: watched %s, change log %s", i, a, b)
		}
	}
	t.Logf("%d events matched across two kills", len(want))
}

// 16 goroutines in 4 processes contend for one lock for 10 s: never two
// holders at once, fencing tokens only grow, and every waiter gets in.
func TestMutexContentionAcrossProcesses(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 3)
	worker := buildLockworker(t)
	var wg sync.WaitGroup
	results := make([]string, 4)
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			out, err := newProc(t, 3*time.Minute, worker, "-url", strings.Join(cl.urls, ","), "-name", "locks.contended",
				"-workers", "4", "-duration", "10s", "-ttl", "5s").combinedOutput()
			results[p] = string(out)
			if err != nil {
				t.Errorf("worker %d: %v\n%s", p, err, out)
			}
		}(p)
	}
	wg.Wait()
	total := int64(0)
	for p, out := range results {
		var r struct {
			Acquired  []int64 `json:"acquired"`
			Violation string  `json:"violation"`
		}
		if err := json.Unmarshal([]byte(lastLine(out)), &r); err != nil {
			t.Fatalf("worker %d output %q: %v", p, out, err)
		}
		if r.Violation != "" {
			t.Fatalf("worker %d: %s", p, r.Violation)
		}
		for i, n := range r.Acquired {
			if n == 0 {
				t.Fatalf("worker %d goroutine %d never acquired the lock", p, i)
			}
			total += n
		}
	}
	t.Logf("16 contenders took the lock %d times", total)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func buildLockworker(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lockworker")
	if out, err := newProc(t, 0, "go", "build", "-o", path, "./lockworker").combinedOutput(); err != nil {
		t.Fatalf("build lockworker: %v\n%s", err, out)
	}
	return path
}

// Killing the holder's process frees the lock within its ttl plus the
// expiry bound.
func TestKilledHolderFreesLock(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 3)
	worker := buildLockworker(t)
	holder := newProc(t, 0, worker, "-url", strings.Join(cl.urls, ","), "-name", "locks.held", "-hold", "-ttl", "2s")
	var out, errOut lockedBuffer
	holder.cmd.Stdout, holder.cmd.Stderr = &out, &errOut
	if err := holder.start(); err != nil {
		t.Fatal(err)
	}
	checkFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if holder.exited() {
			t.Fatalf("holder exited: %v\n%s%s", holder.wait(), out.String(), errOut.String())
		}
		if !strings.HasPrefix(out.String(), "holding") {
			return fmt.Errorf("holder printed %q", out.String())
		}
		return nil
	})
	holder.kill()
	killed := time.Now()

	c := clusterClient(t, cl.urls...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m := cc.NewMutex(s, "locks.held")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	waited := time.Since(killed)
	t.Logf("lock taken %s after the holder was killed", waited)
	if waited > 2*time.Second+1500*time.Millisecond+lateMargin {
		t.Fatalf("the lock stayed held %s after its holder died (ttl 2 s)", waited)
	}
}

// The leader's session ends: exactly one of the other candidates takes
// over, and an observer sees the hand-over.
func TestElectionHandsOver(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	obs := clusterClient(t, cl.urls...)
	seen := obs.Observe(ctx, "elect.svc")
	type candidate struct {
		s *cc.Session
		e *cc.Election
	}
	var cands []candidate
	var leaders sync.Map
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		c := clusterClient(t, cl.urls...)
		s, err := c.NewSession(ctx, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		e := cc.NewElection(s, "elect.svc")
		cands = append(cands, candidate{s, e})
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := e.Campaign(ctx, json.RawMessage(fmt.Sprintf(`"cand-%d"`, i))); err == nil {
				leaders.Store(i, time.Now())
			}
		}(i)
		time.Sleep(100 * time.Millisecond) // a known order of candidacy
	}
	first := waitLeader(t, seen, `"cand-0"`)
	if n := count(&leaders); n != 1 {
		t.Fatalf("%d campaigns returned while cand-0 leads", n)
	}
	// cand-0's session ends: its lease goes, and cand-1 (next in line) leads.
	if err := cands[0].s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	second := waitLeader(t, seen, `"cand-1"`)
	if second.CreateRevision <= first.CreateRevision {
		t.Fatalf("the new leader's key %+v is older than the old one's %+v", second, first)
	}
	time.Sleep(500 * time.Millisecond)
	if n := count(&leaders); n != 2 {
		t.Fatalf("%d campaigns returned after one hand-over, want 2", n)
	}
	cancel()
	wg.Wait()
}

func waitLeader(t *testing.T, seen <-chan *schema.KeyValue, value string) *schema.KeyValue {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case kv := <-seen:
			if kv != nil && string(kv.Value) == value {
				return kv
			}
		case <-timeout:
			t.Fatalf("the observer never saw %s lead", value)
		}
	}
}

func count(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}
