package loglimit

import (
	"testing"
	"time"
)

// A run of like lines is logged once per window; the next line let
// through says how many were held back. Other lines are not held back by
// it.
func TestRepeats(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := NewRepeats(10 * time.Second)
	l.Now = func() time.Time { return now }
	if ok, held := l.Allow("a"); !ok || held != 0 {
		t.Fatalf("first line: %v, %d", ok, held)
	}
	for i := 0; i < 37; i++ {
		now = now.Add(200 * time.Millisecond)
		if ok, _ := l.Allow("a"); ok {
			t.Fatalf("like line %d within the window was let through", i)
		}
	}
	if ok, held := l.Allow("b"); !ok || held != 0 {
		t.Fatalf("another kind of line: %v, %d", ok, held)
	}
	now = now.Add(3 * time.Second) // 10.4 s after the first "a"
	if ok, held := l.Allow("a"); !ok || held != 37 {
		t.Fatalf("after the window: %v, %d held back, want 37", ok, held)
	}
	if ok, _ := l.Allow("a"); ok {
		t.Fatal("the window did not start again")
	}
}

// Every lets the first event through, then none until the interval
// has passed.
func TestEvery(t *testing.T) {
	e := Every{Interval: time.Hour}
	if !e.Allow() {
		t.Fatal("the first event was held back")
	}
	if e.Allow() {
		t.Fatal("a second event within the interval was let through")
	}
	var every Every
	if !every.Allow() || !every.Allow() {
		t.Fatal("a zero interval held an event back")
	}
}
