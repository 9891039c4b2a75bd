package serving

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/decode"
	"github.com/concord-io/concord/service/internal/testwait"
	"github.com/concord-io/concord/subjects"
)

// The pool runs every job, never more at once than its bound, reuses idle
// workers, and its workers exit once idle or once done closes.
func TestWorkerPoolBoundsAndReuse(t *testing.T) {
	const max, jobs = 3, 20
	release := make(chan struct{})
	var running, peak, ran atomic.Int32
	var wg sync.WaitGroup
	done := make(chan struct{})
	p := newWorkerPool(max, time.Hour, done, func(int) {
		n := running.Add(1)
		for {
			old := peak.Load()
			if n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		<-release
		running.Add(-1)
		ran.Add(1)
		wg.Done()
	})
	wg.Add(jobs)
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		for i := 0; i < jobs; i++ {
			p.submit(i) // blocks while max jobs run and none is idle
		}
	}()
	testwait.Until(t, "max jobs run", func() bool { return running.Load() == max })
	select {
	case <-submitted:
		t.Fatal("all jobs were taken while only max could run")
	default:
	}
	if n := len(p.tokens); n != max {
		t.Fatalf("%d workers, want %d", n, max)
	}
	close(release)
	wg.Wait()
	<-submitted
	if ran.Load() != jobs || peak.Load() > max {
		t.Fatalf("ran %d of %d jobs, at most %d at once (bound %d)", ran.Load(), jobs, peak.Load(), max)
	}
	// Idle workers take the next job: no new worker starts.
	wg.Add(1)
	p.submit(0)
	wg.Wait()
	if n := len(p.tokens); n > max {
		t.Fatalf("%d workers after reuse, bound %d", n, max)
	}
	close(done)
	testwait.Until(t, "workers exit on done", func() bool { return len(p.tokens) == 0 })
}

// A worker with nothing to do exits after its idle time.
func TestWorkerPoolIdleWorkerExits(t *testing.T) {
	p := newWorkerPool(4, 10*time.Millisecond, nil, func(int) {})
	p.submit(1)
	testwait.Until(t, "the idle worker exits", func() bool { return len(p.tokens) == 0 })
}

// fencedNode is a node in a bus conflict.
type fencedNode struct{ Node }

func (fencedNode) ConflictError() *schema.Error {
	return schema.Errorf(schema.ErrUnavailable, "two clusters")
}

// While the node is in a bus conflict every request gets its error, but
// cluster status, so that an operator can see the conflict.
func TestFenceSparesClusterStatus(t *testing.T) {
	s := &Server{node: fencedNode{}}
	if e := s.fenceError(subjects.LeaseKeepAlive); e == nil || e.Name != schema.ErrUnavailable {
		t.Fatalf("a keep-alive during the conflict: %v, want unavailable", e)
	}
	if e := s.fenceError(subjects.ClusterStatus); e != nil {
		t.Fatalf("cluster status during the conflict: %v, want served", e)
	}
}

// A request's tenant comes from the server-stamped header; a tenant may
// call the lease and kv endpoints, and is refused the cluster ones.
func TestRequestTenant(t *testing.T) {
	stamped := func(acc string) *nats.Msg {
		return &nats.Msg{Header: nats.Header{decode.HeaderRequestInfo: {`{"acc":"` + acc + `"}`}}}
	}
	if tn, e := requestTenant(subjects.KVPut, &nats.Msg{}); e != nil || tn != fsm.DefaultTenant {
		t.Fatalf("no header: %q %v", tn, e)
	}
	if tn, e := requestTenant(subjects.LeaseKeepAliveMany, stamped("A")); e != nil || tn != "A" {
		t.Fatalf("stamped: %q %v", tn, e)
	}
	for _, ep := range subjects.Endpoints {
		_, e := requestTenant(ep, stamped("A"))
		if ep.ForTenants() != (e == nil) {
			t.Errorf("%s for tenant A: %v", ep, e)
		}
		if e != nil && (e.Name != schema.ErrForbidden || e.Code != 403) {
			t.Errorf("%s for tenant A: %v, want 403 forbidden", ep, e)
		}
		if _, e := requestTenant(ep, &nats.Msg{}); e != nil {
			t.Errorf("%s for the default tenant: %v", ep, e)
		}
	}
	two := stamped("A")
	two.Header.Add(decode.HeaderRequestInfo, `{"acc":"B"}`)
	if _, e := requestTenant(subjects.KVGet, two); e == nil || e.Name != schema.ErrInvalidRequest {
		t.Fatalf("two headers: %v", e)
	}
}
