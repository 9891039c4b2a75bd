package serving

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testwait"
	"github.com/concord-io/concord/service/replica"
)

// gatedLog stands in for Raft's replication in the proposer's unit tests,
// the one part a test cannot hold still: an appended entry stays in
// flight until the test releases it, and then the real state machine
// applies it, as Raft's FSM goroutine would. The black-box and service
// tests run the proposer on real Raft.
type gatedLog struct {
	mu      sync.Mutex
	sm      *replica.StateMachine
	entries [][]byte      // every entry appended, in order
	waiting []*gatedApply // appended, not yet released, oldest first
	// most is the largest number of entries in flight at once.
	most int
	// auto releases every entry as it is appended.
	auto bool
	// failWith, when set, fails the entries released with it.
	failWith error
}

type gatedApply struct {
	entry []byte
	done  chan struct{}
	err   error
	resp  any
}

func (a *gatedApply) Error() error  { <-a.done; return a.err }
func (a *gatedApply) Response() any { <-a.done; return a.resp }
func (a *gatedApply) Index() uint64 { return 0 }

func newGatedLog() *gatedLog {
	return &gatedLog{sm: replica.NewStateMachine(func(uint64, string, []schema.Event) {})}
}

func (g *gatedLog) apply(entry []byte) raft.ApplyFuture {
	g.mu.Lock()
	defer g.mu.Unlock()
	a := &gatedApply{entry: entry, done: make(chan struct{})}
	g.entries = append(g.entries, entry)
	g.waiting = append(g.waiting, a)
	g.most = max(g.most, len(g.waiting))
	if g.auto {
		g.releaseLocked(1)
	}
	return a
}

// release lets the oldest n entries apply, in log order.
func (g *gatedLog) release(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releaseLocked(n)
}

func (g *gatedLog) releaseLocked(n int) {
	for ; n > 0 && len(g.waiting) > 0; n-- {
		a := g.waiting[0]
		g.waiting = g.waiting[1:]
		if g.failWith != nil {
			a.err = g.failWith
		} else {
			a.resp = g.sm.ApplyBatch([]*raft.Log{{Type: raft.LogCommand, Index: uint64(len(g.entries)), Data: a.entry}})[0]
		}
		close(a.done)
	}
}

// set changes how entries are released from now on; auto also releases
// those in flight.
func (g *gatedLog) set(auto bool, failWith error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.auto, g.failWith = auto, failWith
	if auto {
		g.releaseLocked(len(g.waiting))
	}
}

func (g *gatedLog) inflight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

func (g *gatedLog) entry(i int) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.entries[i]
}

// queued is the number of proposals waiting for an entry.
func (p *proposer) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

type proposed struct {
	res *fsm.Result
	err *schema.Error
}

// proposeAsync proposes data from a goroutine of its own.
func proposeAsync(p *proposer, data []byte) <-chan proposed {
	return proposeAsyncUntil(p, data, time.Time{})
}

// proposeAsyncUntil proposes data with a deadline from a goroutine of its
// own.
func proposeAsyncUntil(p *proposer, data []byte, deadline time.Time) <-chan proposed {
	ch := make(chan proposed, 1)
	go func() {
		res, e := p.propose(data, deadline)
		ch <- proposed{res, e}
	}()
	return ch
}

func putCmd(t *testing.T, now int64, key, idem string) []byte {
	t.Helper()
	data, err := fsm.EncodeKeyed(now, idem, &fsm.Put{Key: key, Value: []byte(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func putRevision(t *testing.T, got proposed) int64 {
	t.Helper()
	if got.err != nil || got.res == nil || got.res.Err != nil {
		t.Fatalf("put: %+v", got)
	}
	return got.res.Reply.(*schema.KVPutReply).Revision
}

// With nothing in flight a command is proposed at once, alone, as the
// single entry it would be without batching; while the one entry is in
// flight, commands queue, and the next entry carries them all, in order,
// each with its own result.
func TestProposerIdleAloneBusyBatched(t *testing.T) {
	g := newGatedLog()
	p := newProposer(g.apply, true)
	p.maxInflight = 1
	first := putCmd(t, 1, "a", "")
	r1 := proposeAsync(p, first)
	testwait.Until(t, "the first entry is in flight", func() bool { return g.inflight() == 1 })
	if !bytes.Equal(g.entry(0), first) {
		t.Fatalf("a command alone went as %x, not as its own entry %x", g.entry(0), first)
	}
	var rest []<-chan proposed
	var cmds [][]byte
	for i := 0; i < 5; i++ {
		c := putCmd(t, 2, fmt.Sprintf("b%d", i), fmt.Sprintf("key-%d", i))
		cmds = append(cmds, c)
		rest = append(rest, proposeAsync(p, c))
		// Queue them in a known order.
		testwait.Until(t, "the command queues", func() bool { return p.queued() == i+1 })
	}
	if g.inflight() != 1 {
		t.Fatalf("%d entries in flight, want 1", g.inflight())
	}
	g.release(1)
	if rev := putRevision(t, <-r1); rev != 1 {
		t.Fatalf("first put at revision %d", rev)
	}
	testwait.Until(t, "the batch is in flight", func() bool { return g.inflight() == 1 })
	want, err := fsm.EncodeBatch(cmds)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.entry(1), want) {
		t.Fatal("the second entry is not the five queued commands in order")
	}
	g.release(1)
	for i, ch := range rest {
		if rev := putRevision(t, <-ch); rev != int64(i+2) {
			t.Fatalf("queued put %d at revision %d, want %d", i, rev, i+2)
		}
	}
	// Idle again: the next command goes alone.
	g.set(true, nil)
	last := putCmd(t, 3, "c", "")
	if rev := putRevision(t, <-proposeAsync(p, last)); rev != 7 {
		t.Fatalf("last put at revision %d", rev)
	}
	if !bytes.Equal(g.entry(2), last) || len(g.entries) != 3 {
		t.Fatalf("%d entries; the last is %x", len(g.entries), g.entry(len(g.entries)-1))
	}
	if p.inflight != 0 || p.queued() != 0 {
		t.Fatalf("proposer not idle: %d in flight, %d queued", p.inflight, p.queued())
	}
}

// writing (what listings give way to) holds from a proposal's start to its
// result, whether its entry is in flight or it waits in the queue.
func TestProposerWritingWhileAProposalIsOpen(t *testing.T) {
	g := newGatedLog()
	p := newProposer(g.apply, true)
	p.maxInflight = 1
	if p.writing() {
		t.Fatal("writing before any proposal")
	}
	a := proposeAsync(p, putCmd(t, 1, "a", ""))
	testwait.Until(t, "the first entry is in flight", func() bool { return g.inflight() == 1 })
	b := proposeAsync(p, putCmd(t, 1, "b", ""))
	testwait.Until(t, "the second queues", func() bool { return p.queued() == 1 })
	if !p.writing() {
		t.Fatal("not writing with one entry in flight and one command queued")
	}
	g.release(1)
	putRevision(t, <-a)
	testwait.Until(t, "the queued command's entry is in flight", func() bool { return g.inflight() == 1 })
	if !p.writing() {
		t.Fatal("not writing while the queued command's entry is in flight")
	}
	g.release(1)
	putRevision(t, <-b)
	if p.writing() {
		t.Fatal("writing after every proposal returned")
	}
}

// With K entries in flight, the next command waits; below K it goes at
// once.
func TestProposerKeepsKInFlight(t *testing.T) {
	g := newGatedLog()
	p := newProposer(g.apply, true)
	p.maxInflight = 2
	a := proposeAsync(p, putCmd(t, 1, "a", ""))
	b := proposeAsync(p, putCmd(t, 1, "b", ""))
	testwait.Until(t, "two entries are in flight", func() bool { return g.inflight() == 2 })
	c := proposeAsync(p, putCmd(t, 1, "c", ""))
	d := proposeAsync(p, putCmd(t, 1, "d", ""))
	testwait.Until(t, "two commands queue", func() bool { return p.queued() == 2 })
	if g.inflight() != 2 {
		t.Fatalf("%d entries in flight, want 2", g.inflight())
	}
	g.release(1)
	testwait.Until(t, "the queued commands go in one entry", func() bool { return g.inflight() == 2 && p.queued() == 0 })
	g.release(2)
	revs := map[int64]bool{}
	for _, ch := range []<-chan proposed{a, b, c, d} {
		revs[putRevision(t, <-ch)] = true
	}
	if len(revs) != 4 || len(g.entries) != 3 || g.most != 2 {
		t.Fatalf("revisions %v in %d entries, at most %d in flight; want 4 in 3, 2", revs, len(g.entries), g.most)
	}
}

// A batch holds at most maxCommands commands and maxBytes bytes of them;
// a command larger than maxBytes goes alone.
func TestProposerBatchBounds(t *testing.T) {
	g := newGatedLog()
	p := newProposer(g.apply, true)
	p.maxInflight, p.maxCommands = 1, 3
	first := proposeAsync(p, putCmd(t, 1, "first", ""))
	testwait.Until(t, "the first entry is in flight", func() bool { return g.inflight() == 1 })
	var chs []<-chan proposed
	for i := 0; i < 7; i++ {
		chs = append(chs, proposeAsync(p, putCmd(t, 1, fmt.Sprintf("k%d", i), "")))
		testwait.Until(t, "the command queues", func() bool { return p.queued() == i+1 })
	}
	// Everything queued: from here on each entry applies as it comes.
	g.set(true, nil)
	for _, ch := range chs {
		if got := <-ch; got.err != nil || got.res.Err != nil {
			t.Fatalf("put: %+v", got)
		}
	}
	<-first
	var sizes []int
	for _, e := range g.entries[1:] {
		n := 1
		if fsm.IsBatch(e) {
			n = int(e[1])
		}
		sizes = append(sizes, n)
	}
	if fmt.Sprint(sizes) != "[3 3 1]" {
		t.Fatalf("batches of %v commands, want [3 3 1]", sizes)
	}

	// By bytes: two small commands fit; a large one goes on its own, and
	// so does one that would take a batch past the bound.
	g = newGatedLog()
	p = newProposer(g.apply, true)
	p.maxInflight, p.maxBytes = 1, 200
	small := putCmd(t, 1, "s", "")
	bigData, err := fsm.Encode(1, &fsm.Put{Key: "big", Value: []byte(`"` + string(bytes.Repeat([]byte("x"), 300)) + `"`)})
	if err != nil {
		t.Fatal(err)
	}
	first = proposeAsync(p, small)
	testwait.Until(t, "the first entry is in flight", func() bool { return g.inflight() == 1 })
	chs = nil
	var order [][]byte
	for i, c := range [][]byte{small, small, bigData, small} {
		order = append(order, c)
		chs = append(chs, proposeAsync(p, c))
		testwait.Until(t, "the command queues", func() bool { return p.queued() == i+1 })
	}
	g.set(true, nil)
	for _, ch := range chs {
		<-ch
	}
	<-first
	two, _ := fsm.EncodeBatch(order[:2])
	if len(g.entries) != 4 || !bytes.Equal(g.entries[1], two) || !bytes.Equal(g.entries[2], bigData) || !bytes.Equal(g.entries[3], small) {
		t.Fatalf("%d entries; want the first, a batch of two small ones, the big one alone, the last small one alone", len(g.entries))
	}
}

// A Raft error fails every command of its entry with the wire error a
// command alone would get; commands in other entries are not affected.
func TestProposerRaftErrorFailsTheWholeEntry(t *testing.T) {
	for _, rerr := range []error{raft.ErrNotLeader, raft.ErrLeadershipLost, raft.ErrEnqueueTimeout, raft.ErrRaftShutdown} {
		t.Run(rerr.Error(), func(t *testing.T) {
			g := newGatedLog()
			p := newProposer(g.apply, true)
			p.maxInflight = 1
			first := proposeAsync(p, putCmd(t, 1, "a", ""))
			testwait.Until(t, "the first entry is in flight", func() bool { return g.inflight() == 1 })
			var chs []<-chan proposed
			for i := 0; i < 3; i++ {
				chs = append(chs, proposeAsync(p, putCmd(t, 1, fmt.Sprintf("b%d", i), "")))
				testwait.Until(t, "the command queues", func() bool { return p.queued() == i+1 })
			}
			g.release(1)
			putRevision(t, <-first)
			testwait.Until(t, "the batch is in flight", func() bool { return g.inflight() == 1 })
			g.set(false, rerr)
			g.release(1)
			want := RaftError(rerr)
			for i, ch := range chs {
				got := <-ch
				if got.res != nil || got.err == nil || *got.err != *want {
					t.Fatalf("command %d: %+v, want %+v", i, got, want)
				}
			}
			g.set(true, nil)
			if rev := putRevision(t, <-proposeAsync(p, putCmd(t, 1, "c", ""))); rev != 2 {
				t.Fatalf("after the failed entry, a put at revision %d, want 2", rev)
			}
		})
	}
}

// A response that does not fit the entry (a bug) is an internal error for
// every command, never a wrong reply.
func TestProposerUnexpectedResponse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		commands int
		resp     any
	}{
		{"a result list for a single command", 1, []fsm.Result{{}}},
		{"nothing for a single command", 1, nil},
		{"one result for a batch", 3, &fsm.Result{}},
		{"too few results for a batch", 3, []fsm.Result{{}, {}}},
		{"too many results for a batch", 3, []fsm.Result{{}, {}, {}, {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGatedLog()
			p := newProposer(func(entry []byte) raft.ApplyFuture {
				f := g.apply(entry)
				if fsm.IsBatch(entry) == (tc.commands > 1) {
					return wrongResponse{f, tc.resp}
				}
				return f
			}, true)
			p.maxInflight = 1
			var chs []<-chan proposed
			if tc.commands > 1 {
				// One entry in flight, so that the commands queue and go
				// as one entry after it.
				first := proposeAsync(p, putCmd(t, 1, "first", ""))
				testwait.Until(t, "the first entry is in flight", func() bool { return g.inflight() == 1 })
				for i := 0; i < tc.commands; i++ {
					chs = append(chs, proposeAsync(p, putCmd(t, 1, fmt.Sprint(i), "")))
					testwait.Until(t, "the command queues", func() bool { return p.queued() == i+1 })
				}
				g.release(1)
				putRevision(t, <-first)
			} else {
				chs = append(chs, proposeAsync(p, putCmd(t, 1, "a", "")))
			}
			g.set(true, nil)
			for i, ch := range chs {
				got := <-ch
				if got.res != nil || got.err == nil || got.err.Name != schema.ErrInternal {
					t.Fatalf("command %d: %+v; want an internal error", i, got)
				}
			}
			if p.inflight != 0 || p.queued() != 0 {
				t.Fatalf("proposer not idle: %d in flight, %d queued", p.inflight, p.queued())
			}
		})
	}
}

// wrongResponse is an applied entry with a response that does not fit it.
type wrongResponse struct {
	raft.ApplyFuture
	resp any
}

func (w wrongResponse) Response() any { return w.resp }

// Many goroutines at once (run with -race): every command gets its own
// result, each revision once, and the proposer ends idle.
func TestProposerConcurrent(t *testing.T) {
	for _, k := range []int{1, 2, 4} {
		t.Run(fmt.Sprint("K", k), func(t *testing.T) {
			g := newGatedLog()
			g.set(true, nil)
			p := newProposer(g.apply, true)
			p.maxInflight = k
			const goroutines, each = 32, 40
			var mu sync.Mutex
			seen := map[int64]string{}
			testwait.Concurrently(t, goroutines, func(c int) error {
				for i := 0; i < each; i++ {
					key := fmt.Sprintf("c%d.%d", c, i)
					data, _ := fsm.EncodeKeyed(int64(i), "", &fsm.Put{Key: key, Value: []byte(`1`)})
					res, e := p.propose(data, time.Time{})
					if e != nil {
						return fmt.Errorf("%s: %v", key, e)
					}
					if res.Err != nil {
						return fmt.Errorf("%s: %v", key, res.Err)
					}
					rev := res.Reply.(*schema.KVPutReply).Revision
					ev := res.Events[0]
					if ev.Key != key || ev.Revision != rev {
						return fmt.Errorf("%s got the result of %s at %d", key, ev.Key, ev.Revision)
					}
					mu.Lock()
					other, dup := seen[rev]
					seen[rev] = key
					mu.Unlock()
					if dup {
						return fmt.Errorf("revision %d answered to %s and %s", rev, other, key)
					}
				}
				return nil
			})
			if len(seen) != goroutines*each {
				t.Fatalf("%d revisions for %d puts", len(seen), goroutines*each)
			}
			if g.most > k {
				t.Fatalf("%d entries in flight at once, more than %d", g.most, k)
			}
			if p.inflight != 0 || p.queued() != 0 {
				t.Fatalf("proposer not idle: %d in flight, %d queued", p.inflight, p.queued())
			}
			t.Logf("K=%d: %d commands in %d entries", k, goroutines*each, len(g.entries))
		})
	}
}

// Batching switched off while commands wait (a new term whose members are
// not yet known): the waiting commands drain one entry each, and new ones
// go straight to Raft without waiting for them.
func TestProposerBatchingOffDrainsAlone(t *testing.T) {
	g := newGatedLog()
	p := newProposer(g.apply, true)
	first := proposeAsync(p, putCmd(t, 1, "first", ""))
	testwait.Until(t, "the first entry is in flight", func() bool { return g.inflight() == 1 })
	var queued []<-chan proposed
	for i := 0; i < 3; i++ {
		queued = append(queued, proposeAsync(p, putCmd(t, 1, fmt.Sprint("q", i), "")))
		testwait.Until(t, "the command queues", func() bool { return p.queued() == i+1 })
	}
	p.batching.Store(false)
	direct := proposeAsync(p, putCmd(t, 1, "direct", ""))
	testwait.Until(t, "the new command goes to Raft at once", func() bool { return g.inflight() == 2 })
	g.set(true, nil)
	putRevision(t, <-first)
	putRevision(t, <-direct)
	for _, ch := range queued {
		putRevision(t, <-ch)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.entries) != 5 {
		t.Fatalf("%d entries for 5 commands after batching went off", len(g.entries))
	}
	for i, e := range g.entries {
		if fsm.IsBatch(e) {
			t.Fatalf("entry %d is a batch entry, proposed after batching went off", i)
		}
	}
	if p.inflight != 0 || len(p.queue) != 0 {
		t.Fatalf("proposer not idle: %d in flight, %d queued", p.inflight, len(p.queue))
	}
}

// A command whose deadline passes while it waits for an entry never
// enters the log: it is answered "not started, nothing changed", and the
// commands around it go on in the next entry, in order. The same for a
// command that goes alone, with batching on or off.
func TestProposerLeavesExpiredCommandsOut(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	g := newGatedLog()
	p := newProposer(g.apply, true)
	p.clock = func() time.Time { return now }
	r1 := proposeAsync(p, putCmd(t, 1, "first", ""))
	testwait.Until(t, "the first entry is in flight", func() bool { return g.inflight() == 1 })
	a, b, c := putCmd(t, 2, "a", ""), putCmd(t, 2, "b", "key-b"), putCmd(t, 2, "c", "")
	ra := proposeAsyncUntil(p, a, time.Time{})
	testwait.Until(t, "a queues", func() bool { return p.queued() == 1 })
	rb := proposeAsyncUntil(p, b, now.Add(50*time.Millisecond))
	testwait.Until(t, "b queues", func() bool { return p.queued() == 2 })
	rc := proposeAsyncUntil(p, c, now.Add(time.Hour))
	testwait.Until(t, "c queues", func() bool { return p.queued() == 3 })
	// b's deadline passes while the first entry is in flight.
	now = now.Add(100 * time.Millisecond)
	g.release(1)
	putRevision(t, <-r1)
	testwait.Until(t, "the next entry is in flight", func() bool { return g.inflight() == 1 })
	want, err := fsm.EncodeBatch([][]byte{a, c})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g.entry(1), want) {
		t.Fatal("the next entry is not a and c, in order")
	}
	// b learns its answer with the entry it was left out of.
	g.release(1)
	got := <-rb
	if got.err == nil || got.err.Name != schema.ErrUnavailable || got.res != nil ||
		!strings.Contains(got.err.Description, "passed 50ms ago") || !strings.Contains(got.err.Description, "nothing was changed") {
		t.Fatalf("b, past its deadline: %+v %v", got.res, got.err)
	}
	if ra, rc := putRevision(t, <-ra), putRevision(t, <-rc); ra != 2 || rc != 3 {
		t.Fatalf("a at %d, c at %d", ra, rc)
	}

	// Alone: nothing is appended at all.
	for _, batching := range []bool{true, false} {
		g := newGatedLog()
		g.set(true, nil)
		p := newProposer(g.apply, batching)
		p.clock = func() time.Time { return now }
		got := <-proposeAsyncUntil(p, putCmd(t, 3, "late", ""), now.Add(-time.Millisecond))
		if got.err == nil || got.err.Name != schema.ErrUnavailable || len(g.entries) != 0 {
			t.Fatalf("batching %v: a command past its deadline: %v, %d entries appended", batching, got.err, len(g.entries))
		}
		if got := <-proposeAsyncUntil(p, putCmd(t, 3, "on time", ""), now); got.err != nil || len(g.entries) != 1 {
			t.Fatalf("batching %v: a command at its deadline: %v, %d entries appended", batching, got.err, len(g.entries))
		}
	}
}

// An entry Raft took and never answered (raft v1.8.0 leaves such a future
// unanswered when it shuts down) holds its proposer only until the node
// stops: then it is answered outcome unknown, and a goroutine Close waits
// for is free.
func TestProposerAnswersAnUnansweredEntryWhenTheNodeStops(t *testing.T) {
	g := newGatedLog()
	p := newProposer(g.apply, true)
	ctx, stop := context.WithCancel(context.Background())
	p.stop = ctx
	r := proposeAsync(p, putCmd(t, 1, "a", ""))
	testwait.Until(t, "the entry is in flight", func() bool { return g.inflight() == 1 })
	select {
	case got := <-r:
		t.Fatalf("answered before its entry applied or the node stopped: %+v", got)
	case <-time.After(50 * time.Millisecond):
	}
	stop()
	select {
	case got := <-r:
		if got.err == nil || got.err.Name != schema.ErrOutcomeUnknown {
			t.Fatalf("answer after the node stopped: %+v, want %s", got, schema.ErrOutcomeUnknown)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the proposal still waits for an entry Raft will never answer")
	}
}
