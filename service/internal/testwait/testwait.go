// Package testwait holds the one polling wait the service packages' tests
// share: the condition is checked every millisecond, and the test fails
// after 20 s, a bound that only a hung node reaches on a busy machine.
package testwait

import (
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
