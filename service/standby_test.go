package service

import (
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
)

// The standby says "nothing changed; retry" only where no other node can
// take the request; a write another node may receive is outcome_unknown,
// with the deadline after which it is settled when the request gave one.
func TestStandbyReplyTellsTheTruthAboutTheOutcome(t *testing.T) {
	act := "node n3 cannot serve requests yet: waiting for a leader"
	e := standbyReply(act, false, time.Time{})
	if e.Name != schema.ErrUnavailable || e.Code != 503 || e.Description != act+"; nothing was changed; retry" {
		t.Fatalf("nowhere else: %+v", e)
	}
	e = standbyReply(act, true, time.Time{})
	if e.Name != schema.ErrOutcomeUnknown || e.Code != 504 || !strings.HasPrefix(e.Description, act+"; another node may still receive this request") ||
		!strings.Contains(e.Description, "give requests a Concord-Deadline header") || !strings.Contains(e.Description, "same Concord-Idempotency-Key") {
		t.Fatalf("elsewhere, no deadline: %+v", e)
	}
	d := time.UnixMilli(1_800_000_000_250)
	e = standbyReply(act, true, d)
	if e.Name != schema.ErrOutcomeUnknown || !strings.Contains(e.Description, "no node starts it after its deadline, 2027-01-15T08:00:00.25Z") {
		t.Fatalf("elsewhere, with a deadline: %+v", e)
	}
	if strings.Contains(e.Description, "nothing was changed") {
		t.Fatalf("an outcome_unknown says nothing changed: %q", e.Description)
	}
}
