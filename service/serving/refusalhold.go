package serving

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// refusalHold answers the requests refused for their tenant's rate after
// a delay rather than at once. Answering costs the node as much as
// refusing did (the NATS import in, the reply out: about 45 µs, most of
// it the NATS server's), so a tenant whose clients send their next
// request as soon as the last is answered would keep a core busy with
// refusals and slow every other tenant. Held, each of its requests in
// flight costs one refusal per delay. Every held request is still
// answered with its 429, and before the deadline it carries: the hold
// changes when a refusal arrives, never what it says.
type refusalHold struct {
	delay time.Duration
	// max bounds the requests held at once (their messages are kept
	// until answered); past it, a refusal is answered at once.
	max    int
	answer func(heldRefusal)

	mu     sync.Mutex
	held   refusalHeap
	closed bool          // run has returned: nothing more is held
	wake   chan struct{} // a request was held, maybe before the next due
	done   chan struct{} // closed when run returns, every held refusal answered
}

// heldRefusal is a request refused without being served: its endpoint,
// message, error and tenant, when it arrived and, once held, when it
// falls due.
type heldRefusal struct {
	ep         subjects.Endpoint
	m          *nats.Msg
	e          *schema.Error
	tenant     string
	start, due time.Time
}

func newRefusalHold(delay time.Duration, max int, answer func(heldRefusal)) *refusalHold {
	return &refusalHold{delay: delay, max: max, answer: answer, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// hold keeps r (whose due it sets) to be answered at now+delay, or a margin before deadline
// when that is sooner; it reports false, holding nothing, when the hold
// is full or there is no time to wait, so the caller answers at once.
func (h *refusalHold) hold(r heldRefusal, now, deadline time.Time) bool {
	due := now.Add(h.delay)
	if d := deadline.Add(-heldMargin); !deadline.IsZero() && d.Before(due) {
		due = d
	}
	if !due.After(now) {
		return false
	}
	h.mu.Lock()
	if h.closed || len(h.held) >= h.max {
		h.mu.Unlock()
		return false
	}
	r.due = due
	heap.Push(&h.held, r)
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return true
}

// heldMargin is how long before a request's deadline its held refusal is
// answered, for the reply's way back to the requester.
const heldMargin = 50 * time.Millisecond

// run answers held refusals as they fall due, until ctx ends; then it
// answers the rest at once.
func (h *refusalHold) run(ctx context.Context) {
	defer close(h.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		now := time.Now()
		h.mu.Lock()
		var due []heldRefusal
		for len(h.held) > 0 && !h.held[0].due.After(now) {
			due = append(due, heap.Pop(&h.held).(heldRefusal))
		}
		next := time.Hour
		if len(h.held) > 0 {
			next = h.held[0].due.Sub(now)
		}
		h.mu.Unlock()
		for _, r := range due {
			h.answer(r)
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			h.mu.Lock()
			rest := h.held
			h.held, h.closed = nil, true
			h.mu.Unlock()
			for _, r := range rest {
				h.answer(r)
			}
			return
		case <-h.wake:
		case <-t.C:
		}
	}
}

// refusalHeap orders held refusals by when they fall due.
type refusalHeap []heldRefusal

func (q refusalHeap) Len() int           { return len(q) }
func (q refusalHeap) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q refusalHeap) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *refusalHeap) Push(x any)        { *q = append(*q, x.(heldRefusal)) }
func (q *refusalHeap) Pop() any {
	old := *q
	r := old[len(old)-1]
	old[len(old)-1] = heldRefusal{}
	*q = old[:len(old)-1]
	return r
}
