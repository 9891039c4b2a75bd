package serving

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/concord-io/concord/schema"
)

// tenantRates holds the leader's token bucket of each tenant with a
// requests_per_second quota. A rate concerns time, which the state
// machine does not read, so it is enforced here, at the edge, before a
// request takes a worker's time: a tenant over its rate is refused at the
// cost of a map look-up, and the other tenants' requests go on. The quota
// itself is replicated state, so every leader enforces the same one; the
// buckets start full on a new leader.
type tenantRates struct {
	mu       sync.Mutex
	limiters map[string]*tenantLimiter
	// n is len(limiters), read without mu: while no tenant has a rate,
	// which is the usual case, allow takes no lock.
	n atomic.Int64
}

type tenantLimiter struct {
	lim *rate.Limiter
	rps int64
}

// allow takes a token from tenant's bucket of rps tokens a second, as
// many at once; rps 0 is no bound.
func (t *tenantRates) allow(tenant string, rps int64) bool {
	if rps <= 0 && t.n.Load() == 0 {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.limiters[tenant]
	if rps <= 0 {
		if l != nil {
			delete(t.limiters, tenant)
			t.n.Store(int64(len(t.limiters)))
		}
		return true
	}
	switch {
	case l == nil:
		if t.limiters == nil {
			t.limiters = map[string]*tenantLimiter{}
		}
		l = &tenantLimiter{lim: rate.NewLimiter(rate.Limit(rps), int(rps)), rps: rps}
		t.limiters[tenant] = l
		t.n.Store(int64(len(t.limiters)))
	case l.rps != rps:
		l.lim.SetLimit(rate.Limit(rps))
		l.lim.SetBurst(int(rps))
		l.rps = rps
	}
	return l.lim.Allow()
}

// refusalDelay is how long a refusal for the rate is held before it is
// answered (refusalHold): a client waiting for its answer then sends at
// most one request a second per request in flight. It is shorter than
// the timeouts clients use (nats req's 5 s; a request's own deadline
// shortens it further).
const refusalDelay = time.Second

// maxHeldRefusals bounds the refusals held at once, all tenants together.
const maxHeldRefusals = 10_000

// rateError is the reply to a request over its tenant's rate.
func rateError(tenant string, rps int64) *schema.Error {
	return schema.Errorf(schema.ErrLimitExceeded, "tenant %s is over its quota of %d requests per second; nothing was changed; send fewer, or retry later (a refusal for the rate is answered after up to %s, so that clients sending too fast slow down)", tenant, rps, refusalDelay)
}

// tenantCounters caches each tenant's series of TenantRequests, so that
// counting a request is a lock-free look-up and an atomic add: the
// label's look-up (a lock) and the vector's (a hash and a lock) are paid
// once per tenant and outcome.
type tenantCounters struct {
	byTenant sync.Map // tenant → *outcomeCounters
}

type outcomeCounters struct {
	ok    prometheus.Counter
	other sync.Map // error name → prometheus.Counter
}

// count counts a request of tenant with outcome e (nil: ok).
func (c *tenantCounters) count(vec *prometheus.CounterVec, label func(string) string, tenant string, e *schema.Error) {
	v, ok := c.byTenant.Load(tenant)
	if !ok {
		v, _ = c.byTenant.LoadOrStore(tenant, &outcomeCounters{ok: vec.WithLabelValues(label(tenant), "ok")})
	}
	oc := v.(*outcomeCounters)
	if e == nil {
		oc.ok.Inc()
		return
	}
	cv, ok := oc.other.Load(e.Name)
	if !ok {
		cv, _ = oc.other.LoadOrStore(e.Name, vec.WithLabelValues(label(tenant), e.Name))
	}
	cv.(prometheus.Counter).Inc()
}
