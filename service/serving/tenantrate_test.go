package serving

import (
	"testing"

	"github.com/concord-io/concord/schema"
)

// A tenant's bucket holds rps tokens: a burst of rps passes, the next is
// refused; other tenants have buckets of their own; rps 0 is no bound; a
// changed quota takes effect at once.
func TestTenantRates(t *testing.T) {
	var r tenantRates
	for i := range 5 {
		if !r.allow("A", 5) {
			t.Fatalf("request %d of a burst of 5 refused", i+1)
		}
	}
	if r.allow("A", 5) {
		t.Fatal("a sixth request in the same instant passed a quota of 5 per second")
	}
	if !r.allow("B", 5) {
		t.Fatal("A's rate held B back")
	}
	for range 100 {
		if !r.allow("C", 0) {
			t.Fatal("a tenant without a rate quota was refused")
		}
	}
	if !r.allow("A", 0) {
		t.Fatal("A was refused after its rate quota was lifted")
	}
	if _, ok := r.limiters["A"]; ok {
		t.Fatal("a lifted quota kept its bucket")
	}
	e := rateError("A", 5)
	if e.Name != schema.ErrLimitExceeded || e.Code != 429 {
		t.Fatalf("rate error %v, want 429 limit_exceeded", e)
	}
}
