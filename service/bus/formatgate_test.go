package bus

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
)

// askLog answers the gate's questions from a table and counts them.
type askLog struct {
	mu      sync.Mutex
	formats map[raft.ServerID]int
	fail    map[raft.ServerID]bool
	asked   map[raft.ServerID]int
}

func (a *askLog) ask(id raft.ServerID) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked[id]++
	if a.fail[id] {
		return 0, errors.New("no responders")
	}
	return a.formats[id], nil
}

func servers(ids ...string) []raft.Server {
	out := make([]raft.Server, len(ids))
	for i, id := range ids {
		out[i] = raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter}
	}
	return out
}

// The gate turns batching on only when every other member has said it
// reads batch entries. A member that never answered, or that says it runs
// an older release, keeps it off, and is asked again every round; a member
// that answered once and then falls silent (it is down) does not.
func TestFormatGate(t *testing.T) {
	var on bool
	g := NewFormatGate(FormatGateOptions{Batching: func(b bool) { on = b }})
	a := &askLog{
		formats: map[raft.ServerID]int{"n2": fsm.LogFormat, "n3": 0},
		fail:    map[raft.ServerID]bool{},
		asked:   map[raft.ServerID]int{},
	}
	three := servers("n1", "n2", "n3")
	check := func(want bool, srv []raft.Server, why string) {
		t.Helper()
		got, reasons := g.check(srv, "n1", a.ask)
		if got != want || on != want {
			t.Fatalf("check = %v (gate set %v), want %v; reasons %q", got, on, want, reasons)
		}
		if joined := strings.Join(reasons, "; "); !strings.Contains(joined, why) || (want && joined != "") {
			t.Fatalf("reasons %q, want them to say %q", joined, why)
		}
	}

	check(true, servers("n1"), "")
	if len(a.asked) != 0 {
		t.Fatalf("the leader asked %v; it knows its own release", a.asked)
	}
	check(false, three, "node n3 runs a release that reads log format 0")
	a.formats["n3"] = fsm.LogFormatBatch - 1
	check(false, three, "node n3 runs a release that reads log format 2")
	a.formats["n3"], a.fail["n3"] = fsm.LogFormat, true
	check(false, three, "node n3 has not said which log format it reads: no responders")
	a.fail["n3"] = false // upgraded and back
	check(true, three, "")
	if a.asked["n2"] != 4 || a.asked["n3"] != 4 {
		t.Fatalf("asked %v, want every member every round", a.asked)
	}

	// A known member that goes down keeps batching on.
	a.fail["n3"] = true
	check(true, three, "")
	// One that comes back on an older release turns it off.
	a.fail["n3"], a.formats["n3"] = false, 0
	check(false, three, "node n3 runs a release that reads log format 0")
	a.formats["n3"] = fsm.LogFormat
	check(true, three, "")

	// A new member is unknown until it answers or its join is checked.
	four := servers("n1", "n2", "n3", "n4")
	a.fail["n4"] = true
	check(false, four, "node n4 has not said")
	g.learned("n4", fsm.LogFormat) // as CheckJoiner learns it
	check(true, four, "")

	// The newest format all read: commands of the history's format wait
	// for the last member on a release that reads batches but not them.
	if !g.AllRead(fsm.LogFormatHistory) {
		t.Fatal("every member reads the history's format, the gate says not")
	}
	a.formats["n2"] = fsm.LogFormatBatch
	check(true, four, "")
	if g.AllRead(fsm.LogFormatHistory) || !g.AllRead(fsm.LogFormatBatch) {
		t.Fatalf("n2 reads format %d: allRead(%d) %v, allRead(%d) %v", fsm.LogFormatBatch,
			fsm.LogFormatHistory, g.AllRead(fsm.LogFormatHistory), fsm.LogFormatBatch, g.AllRead(fsm.LogFormatBatch))
	}
	a.formats["n2"] = fsm.LogFormat

	// A new term starts from nothing.
	g.reset()
	if on {
		t.Fatal("batching on after reset")
	}
	if g.AllRead(fsm.LogFormatBatch) {
		t.Fatal("a new term knows what members read before asking")
	}
	check(false, four, "node n4 has not said")
}

// A reset while members are being asked wins: the check that began
// before it cannot turn batching on.
func TestFormatGateResetDuringCheck(t *testing.T) {
	var mu sync.Mutex
	on := false
	g := NewFormatGate(FormatGateOptions{Batching: func(b bool) { mu.Lock(); on = b; mu.Unlock() }})
	asking, resetDone := make(chan struct{}), make(chan struct{})
	ask := func(raft.ServerID) (int, error) {
		close(asking)
		<-resetDone
		return fsm.LogFormat, nil
	}
	done := make(chan bool)
	go func() {
		on, _ := g.check(servers("n1", "n2"), "n1", ask)
		done <- on
	}()
	<-asking
	g.reset()
	close(resetDone)
	if <-done {
		t.Fatal("check reported batching on after a reset")
	}
	mu.Lock()
	defer mu.Unlock()
	if on {
		t.Fatal("a check from before the reset turned batching on")
	}
}
