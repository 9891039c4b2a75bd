package serving

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A held refusal is answered no sooner than its delay, or a margin before
// its deadline when that is sooner; in the order they fall due; a full
// hold or a deadline too near holds nothing; the end of the context
// answers what is left at once.
func TestRefusalHold(t *testing.T) {
	type answered struct {
		reply string
		at    time.Time
	}
	var mu sync.Mutex
	var got []answered
	h := newRefusalHold(300*time.Millisecond, 3, func(r heldRefusal) {
		mu.Lock()
		got = append(got, answered{r.m.Reply, time.Now()})
		mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	now := time.Now()
	ref := func(reply string) heldRefusal { return heldRefusal{m: &nats.Msg{Reply: reply}} }
	if !h.hold(ref("full-delay"), now, time.Time{}) {
		t.Fatal("a refusal without a deadline was not held")
	}
	// Due 100 ms after now: before the first.
	if !h.hold(ref("deadline"), now, now.Add(100*time.Millisecond+heldMargin)) {
		t.Fatal("a refusal with time before its deadline was not held")
	}
	if h.hold(ref("too-near"), now, now.Add(heldMargin)) {
		t.Fatal("a refusal whose deadline leaves no time to wait was held")
	}
	if !h.hold(ref("third"), now.Add(time.Millisecond), time.Time{}) {
		t.Fatal("the third refusal was not held")
	}
	if h.hold(ref("over"), now, time.Time{}) {
		t.Fatal("a fourth refusal was held past the bound of 3")
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("answered %d of 3 held refusals in 10 s", len(got))
	}
	want := []struct {
		reply string
		due   time.Duration
	}{{"deadline", 100 * time.Millisecond}, {"full-delay", 300 * time.Millisecond}, {"third", 301 * time.Millisecond}}
	for i, w := range want {
		if got[i].reply != w.reply {
			t.Fatalf("answer %d went to %q, want %q (answers %v)", i, got[i].reply, w.reply, got)
		}
		if early := now.Add(w.due).Sub(got[i].at); early > 0 {
			t.Errorf("%s answered %v before it fell due", w.reply, early)
		}
	}
}

// When the server's context ends, held refusals are answered at once
// rather than left without a reply, and later ones are not held.
func TestRefusalHoldAnswersAtEnd(t *testing.T) {
	answered := make(chan string, 2)
	h := newRefusalHold(time.Hour, 10, func(r heldRefusal) { answered <- r.m.Reply })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.run(ctx); close(done) }()
	now := time.Now()
	for _, reply := range []string{"a", "b"} {
		if !h.hold(heldRefusal{m: &nats.Msg{Reply: reply}}, now, time.Time{}) {
			t.Fatalf("%s not held", reply)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	if len(answered) != 2 {
		t.Fatalf("answered %d of 2 held refusals at the end", len(answered))
	}
	if h.hold(heldRefusal{m: &nats.Msg{Reply: "late"}}, time.Now(), time.Time{}) {
		t.Fatal("a refusal was held after the end, with nothing left to answer it")
	}
}
