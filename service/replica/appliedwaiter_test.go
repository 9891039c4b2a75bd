package replica

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/schema"
)

// A tail of entries the state machine never sees does not hold a read up;
// a command it has not applied does, until the timeout.
func TestAppliedWaiterSkipsNonCommandTail(t *testing.T) {
	store := raft.NewInmemStore()
	applied := NewAppliedIndex()
	applied.set(3)
	logs := []*raft.Log{
		{Index: 3, Type: raft.LogCommand},
		{Index: 4, Type: raft.LogNoop},
		{Index: 5, Type: raft.LogBarrier},
	}
	if err := store.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	w := AppliedWaiter{Applied: &applied, Log: store}
	if e := w.Wait(5, time.Minute); e != nil {
		t.Fatalf("no-op tail: %v", e)
	}
	if err := store.StoreLog(&raft.Log{Index: 6, Type: raft.LogCommand}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if e := w.Wait(6, 50*time.Millisecond); e == nil || e.Name != schema.ErrUnavailable {
		t.Fatalf("unapplied command: %v, want unavailable", e)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("gave up before the timeout")
	}
	done := make(chan *schema.Error, 1)
	go func() { done <- w.Wait(6, time.Minute) }()
	applied.set(6)
	if e := <-done; e != nil {
		t.Fatalf("after applying: %v", e)
	}
	if e := (AppliedWaiter{Applied: &applied, Log: store}).Wait(9, time.Minute); e == nil || e.Name != schema.ErrUnavailable {
		t.Fatalf("a missing log entry: %v, want unavailable", e)
	}
}
