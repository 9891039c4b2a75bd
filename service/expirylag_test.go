package service

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/service/internal/testwait"
)

// A mass expiry's lag runs from each lease's deadline to the moment its
// expiry is applied, not to the moment the leader stamped the expire
// command. Here a few thousand leases share one deadline, and the apply
// path is kept busy past it by a read that holds the state, as a long
// prefix read does: the expire entries are stamped at the deadline but
// cannot apply until the read lets go. Every lease's lag must then be at
// least the time from the (latest possible) deadline to that release.
// With the stamp as the end point, the lags read a few milliseconds.
func TestExpiryLagMeasuresToTheCommit(t *testing.T) {
	s, nc := startTest(t, nil)
	const (
		n     = 3000
		ttl   = 2 * time.Second
		round = 300 // grants between two renewals of all granted so far
		hold  = 500 * time.Millisecond
	)
	var ids []int64
	renewAll := func() time.Time {
		var r schema.LeaseKeepAliveManyReply
		if e := testnats.Request(t, nc, "concord.lease.keepalive_many", map[string]any{"ids": ids}, &r); e != nil {
			t.Fatalf("keepalive_many: %v", e)
		}
		if len(r.NotFound) > 0 || len(r.Leases) != len(ids) {
			t.Fatalf("keepalive_many renewed %d of %d leases; not found: %d", len(r.Leases), len(ids), len(r.NotFound))
		}
		return time.Now()
	}
	// Grant in rounds, renewing everything granted so far between them,
	// so that no lease can expire while the rest are granted however slow
	// the machine is.
	for {
		got := make([]int64, round)
		testwait.Concurrently(t, 10, func(c int) error {
			for i := c; i < round; i += 10 {
				var g schema.LeaseGrantReply
				if e := testnats.Request(t, nc, "concord.lease.grant", map[string]any{"ttl": int(ttl / time.Second)}, &g); e != nil {
					return fmt.Errorf("grant: %v", e)
				}
				got[i] = g.ID
			}
			return nil
		})
		ids = append(ids, got...)
		if len(ids) >= n {
			break
		}
		renewAll()
	}
	// One last renewal gives all n leases one deadline D: the lease clock
	// when the leader applied it, plus the ttl. The leader stamped it after
	// sent and applied it before replied, so D falls (in this process's
	// monotonic time, which the lease clock advances with) between
	// sent+ttl and replied+ttl.
	sent := time.Now()
	replied := renewAll()
	latestDeadline := replied.Add(ttl)

	// Hold the state for reading from just before the earliest possible D
	// until hold after the latest possible one: no entry applies meanwhile.
	holding, release, done := make(chan int64), make(chan struct{}), make(chan struct{})
	time.Sleep(time.Until(sent.Add(ttl - 100*time.Millisecond)))
	go func() {
		defer close(done)
		s.sm.Read(func(st *fsm.State) {
			explicit, _ := st.LeaseCount()
			holding <- explicit
			<-release
		})
	}()
	// Whenever the read got the lock, no expiry had applied before it if
	// all n leases were still there.
	if left := <-holding; left != n {
		t.Fatalf("%d of %d leases were left when the read took the state: the expiry applied before the test could hold it", left, n)
	}
	time.Sleep(time.Until(latestDeadline.Add(hold)))
	released := time.Now() // the read lets go after this
	close(release)
	<-done

	// The lag is observed just after the expiry applies, outside the
	// state's lock: wait for the leases to go and their samples to come.
	var h *dto.Histogram
	for giveUp := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var left int64
		s.sm.Read(func(st *fsm.State) { left, _ = st.LeaseCount() })
		var m dto.Metric
		if err := s.metrics.LeaseExpiryLag.Write(&m); err != nil {
			t.Fatal(err)
		}
		h = m.GetHistogram()
		if left == 0 && h.GetSampleCount() >= n {
			break
		}
		if time.Now().After(giveUp) {
			t.Fatalf("30s after the read let go: %d leases not expired, %d lag samples of %d", left, h.GetSampleCount(), n)
		}
	}
	if h.GetSampleCount() != n {
		t.Fatalf("expiry lag has %d samples, want one per lease: %d", h.GetSampleCount(), n)
	}

	// Each expiry applied after released, and each deadline was at most
	// latestDeadline; the lease clock counts whole milliseconds, so a
	// difference on it can read up to 1 ms short.
	minLag := (released.Sub(latestDeadline) - time.Millisecond).Seconds()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() < minLag && b.GetCumulativeCount() != 0 {
			t.Errorf("%d leases expired with a lag of at most %vs, but none applied sooner than %.3fs after its deadline", b.GetCumulativeCount(), b.GetUpperBound(), minLag)
		}
	}
	if mean := h.GetSampleSum() / n; mean < minLag {
		t.Errorf("mean expiry lag %.3fs, but every lease waited at least %.3fs from its deadline to its expiry's commit", mean, minLag)
	}
	t.Logf("%d leases: expiry lag mean %.3fs, every one at least %.3fs", n, h.GetSampleSum()/n, minLag)
}
