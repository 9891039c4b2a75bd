package client

import (
	"errors"
	"testing"
	"time"

	"github.com/concord-io/concord/subjects"
)

// A write whose earlier attempt may have been applied and whose last
// attempt was refused 503 ("nothing changed") has an unknown outcome, and
// must not match ErrUnavailable: a caller that tests for it would believe
// nothing changed. The robustness suite's history caught two such puts
// applied after the client reported an error matching ErrUnavailable.
func TestOutcomeUnknownDoesNotMatchTheLastAttempt(t *testing.T) {
	c := &Client{}
	last := &Error{Code: 503, Name: "unavailable", Description: "the request's deadline passed; nothing was changed"}
	err := c.failed(subjects.KVPut, last, true, time.Now())
	if !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("%v does not match ErrOutcomeUnknown", err)
	}
	if errors.Is(err, ErrUnavailable) {
		t.Fatalf("%v matches ErrUnavailable", err)
	}
	var e *Error
	if errors.As(err, &e) {
		t.Fatalf("%v carries the last attempt's *Error %v", err, e)
	}
	if err := c.failed(subjects.KVPut, last, false, time.Now()); !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("a write no attempt may have applied: %v", err)
	}
}
