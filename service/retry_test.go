package service

import (
	"context"
	"testing"
	"time"
)

// Attempts are spaced at least first, 2·first, … up to max apart, and end
// with the first success.
func TestRetryBacksOff(t *testing.T) {
	const first, max = 5 * time.Millisecond, 20 * time.Millisecond
	var at []time.Time
	ok := retry(context.Background(), first, max, func() bool {
		at = append(at, time.Now())
		return len(at) == 5
	})
	if !ok || len(at) != 5 {
		t.Fatalf("retry = %v after %d attempts, want true after 5", ok, len(at))
	}
	want := []time.Duration{first, 2 * first, max, max}
	for i, w := range want {
		if gap := at[i+1].Sub(at[i]); gap < w {
			t.Errorf("attempt %d came %s after the one before, want at least %s", i+2, gap, w)
		}
	}
}

// An ended context stops the loop during a wait, and before any attempt.
func TestRetryStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	attempts := 0
	done := make(chan bool)
	go func() {
		done <- retry(ctx, time.Hour, time.Hour, func() bool { attempts++; return false })
	}()
	cancel()
	if ok := <-done; ok || attempts > 1 {
		t.Fatalf("retry = %v after %d attempts, want false after at most 1", ok, attempts)
	}
	if retry(ctx, time.Millisecond, time.Millisecond, func() bool { t.Fatal("attempt after the context ended"); return true }) {
		t.Fatal("retry reported success with an ended context")
	}
}
