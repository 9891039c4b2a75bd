package serving

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
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

// A request over its tenant's rate is held without its body (thousands
// may be held, and a body may be megabytes), answered 429 after the
// hold, and its latency counts from when it fell due: the hold is
// deliberate, not slowness.
func TestHeldRefusalKeepsNoBodyAndNoHoldInLatency(t *testing.T) {
	s, nc, n := startServer(t, nil)
	cmd, err := fsm.Encode(0, &fsm.SetQuota{Tenant: "T", Quota: fsm.Quota{RequestsPerSecond: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Apply(cmd).Error(); err != nil {
		t.Fatal(err)
	}
	names, _ := subjects.New(subjects.DefaultPrefix)
	body := []byte(`{"key":"k","value":"` + strings.Repeat("v", 100<<10) + `"}`)
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	const sent = 5
	for range sent {
		m := &nats.Msg{Subject: names.Request(subjects.KVPut), Reply: inbox, Data: body,
			Header: nats.Header{"Nats-Request-Info": []string{`{"acc":"T"}`}}}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.refusals.mu.Lock()
		held := slices.Clone(s.refusals.held)
		s.refusals.mu.Unlock()
		if len(held) >= sent-2 {
			for _, r := range held {
				if len(r.m.Data) != 0 || r.m.Header != nil || r.m.Reply != inbox {
					t.Fatalf("a held refusal keeps %d bytes of body and header %v (reply %q)", len(r.m.Data), r.m.Header, r.m.Reply)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d refusals held after 10 s, want at least %d", len(held), sent-2)
		}
		time.Sleep(5 * time.Millisecond)
	}
	refused := 0
	for range sent {
		m, err := replies.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("a reply: %v", err)
		}
		if m.Header.Get(schema.HeaderErrorCode) == "429" {
			refused++
		}
	}
	if refused < sent-2 {
		t.Fatalf("%d of %d over the rate of 1/s refused", refused, sent)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.RequestStats())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "concord_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			h := m.GetHistogram()
			for _, b := range h.GetBucket() {
				// Every request, the held ones too, well under the hold.
				if b.GetUpperBound() == 0.5 && b.GetCumulativeCount() != h.GetSampleCount() {
					t.Fatalf("%d of %d requests counted as taking over 0.5 s: the hold was counted", h.GetSampleCount()-b.GetCumulativeCount(), h.GetSampleCount())
				}
			}
		}
		return
	}
	t.Fatal("no request durations")
}
