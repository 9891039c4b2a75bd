package client

import (
	"testing"
	"time"
)

// A client moves after three standby answers spread over at least a
// second, within ten seconds of the first; a served call ends the run; and
// it moves at most once every five seconds.
func TestStandbyTrackerDecidesMoves(t *testing.T) {
	var tr standbyTracker
	at := time.Unix(1_800_000_000, 0)
	step := func(d time.Duration) bool { at = at.Add(d); return tr.standbyAnswer(at) }
	if step(0) || step(100*time.Millisecond) || step(100*time.Millisecond) {
		t.Fatal("moved after three answers within 200 ms")
	}
	if !step(time.Second) {
		t.Fatal("did not move after four answers over 1.2 s")
	}
	// Right after a move: not again within five seconds, however many.
	for i := 0; i < 10; i++ {
		if step(400 * time.Millisecond) {
			t.Fatalf("moved again %d answers after the last move", i+1)
		}
	}
	// The run went on: once five seconds have passed, its next answer
	// moves at once.
	if !step(1100 * time.Millisecond) {
		t.Fatal("did not move again five seconds after the last move, the run going on")
	}
	// A call served in between starts the count again.
	at = at.Add(10 * time.Second)
	step(0)
	step(600 * time.Millisecond)
	tr.served()
	if step(600 * time.Millisecond) {
		t.Fatal("moved on a run a served call had ended")
	}
	// Answers too far apart are not one run.
	at = at.Add(30 * time.Second)
	if step(0) || step(6*time.Second) || step(6*time.Second) {
		t.Fatal("moved on answers spread over 12 s")
	}
}
