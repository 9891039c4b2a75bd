// Package testwait holds the waits the service packages' tests share: a
// polling wait whose condition is checked every millisecond and which
// fails after 20 s, a bound only a hung node reaches on a busy machine;
// and a run of goroutines whose errors all fail the test.
package testwait

import (
	"sync"
	"testing"
	"time"
)

// Until polls cond until it holds, failing t with what after 20 s.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Concurrently runs f(0) … f(n-1) at once and fails the test with every
// error they return.
func Concurrently(t testing.TB, n int, f func(c int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for c := 0; c < n; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(c); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}
