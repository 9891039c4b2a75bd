package replica

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/datadir"
	"github.com/concord-io/concord/service/decode"
)

// putLog is the log entry at index of a put of key.
func putLog(t testing.TB, index uint64, key string) *raft.Log {
	t.Helper()
	data, err := fsm.Encode(1000, &fsm.Put{Key: key, Value: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Type: raft.LogCommand, Index: index, Data: data}
}

func prefixKeys(v *fsm.View) []string {
	var keys []string
	for _, kv := range v.Get(fsm.GetQuery{IsPrefix: true, Limit: 1 << 30}, v.Now()).KVs {
		keys = append(keys, kv.Key)
	}
	return keys
}

// Reads between two applies share one view; an apply or a restore makes
// the next read take a new one, which shows the change, while a view
// already handed out keeps its moment.
func TestStateMachineViewFollowsApplies(t *testing.T) {
	m := NewStateMachine(func(uint64, string, []schema.Event) {})
	m.ApplyBatch([]*raft.Log{putLog(t, 1, "a")})
	v1 := m.View(fsm.DefaultTenant)
	if m.View(fsm.DefaultTenant) != v1 {
		t.Fatal("two reads with no apply between took two views")
	}
	m.ApplyBatch([]*raft.Log{putLog(t, 2, "b"), putLog(t, 3, "c")})
	v2 := m.View(fsm.DefaultTenant)
	if v2 == v1 {
		t.Fatal("a read after an apply got the view from before it")
	}
	if got := fmt.Sprint(prefixKeys(v2)); got != "[a b c]" || v2.Revision() != 3 {
		t.Fatalf("view after the apply: keys %s at revision %d, want [a b c] at 3", got, v2.Revision())
	}
	if got := fmt.Sprint(prefixKeys(v1)); got != "[a]" || v1.Revision() != 1 {
		t.Fatalf("the earlier view moved: keys %s at revision %d, want [a] at 1", got, v1.Revision())
	}

	// A restore replaces the state: the view of the old one must go.
	src := fsm.New()
	for _, k := range []string{"x", "y"} {
		data, _ := fsm.Encode(1000, &fsm.Put{Key: k, Value: json.RawMessage(`2`)})
		if r := src.Apply(data); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	var buf bytes.Buffer
	if _, err := datadir.WriteSnapshotFrame(&buf, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(io.NopCloser(&buf)); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(prefixKeys(m.View(fsm.DefaultTenant))); got != "[x y]" {
		t.Fatalf("view after a restore: keys %s, want [x y]", got)
	}
}

// Views are taken and read while Raft applies: run under -race. Every view
// a reader gets is a state the log went through: its revision counts its
// keys (one new key per entry), and its keys are the first that many.
func TestStateMachineViewsBesideApplies(t *testing.T) {
	m := NewStateMachine(func(uint64, string, []schema.Event) {})
	const entries = 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				v := m.View(fsm.DefaultTenant)
				keys := prefixKeys(v)
				if int64(len(keys)) != v.Revision() {
					errs <- fmt.Errorf("a view at revision %d holds %d keys", v.Revision(), len(keys))
					return
				}
				for i, k := range keys {
					if k != fmt.Sprintf("k%05d", i+1) {
						errs <- fmt.Errorf("a view at revision %d holds %s at %d", v.Revision(), k, i)
						return
					}
				}
			}
		}()
	}
	for i := uint64(1); i <= entries; i++ {
		m.ApplyBatch([]*raft.Log{putLog(t, i, fmt.Sprintf("k%05d", i))})
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v := m.View(fsm.DefaultTenant); v.Revision() != entries || v.KeyCount() != entries {
		t.Fatalf("last view: revision %d, %d keys", v.Revision(), v.KeyCount())
	}
}

// applyPause is the pause between BenchmarkApplyBesideBigReads's puts
// (the sleep takes longer on a busy machine).
const applyPause = 100 * time.Microsecond

// loadPrefix returns a state machine holding keys keys r.0000000 on, each
// with the same 100-byte value (returned), applied in batch entries of a
// thousand puts as a leader's would be.
func loadPrefix(b *testing.B, keys int) (*StateMachine, json.RawMessage) {
	b.Helper()
	m := NewStateMachine(func(uint64, string, []schema.Event) {})
	value := json.RawMessage(`"` + strings.Repeat("v", 98) + `"`)
	var index uint64
	batch := make([][]byte, 0, 1000)
	for i := 0; i < keys; i++ {
		data, err := fsm.Encode(1000, &fsm.Put{Key: fmt.Sprintf("r.%07d", i), Value: value})
		if err != nil {
			b.Fatal(err)
		}
		if batch = append(batch, data); len(batch) == cap(batch) || i == keys-1 {
			entry, err := fsm.EncodeBatch(batch)
			if err != nil {
				b.Fatal(err)
			}
			index++
			m.ApplyBatch([]*raft.Log{{Type: raft.LogCommand, Index: index, Data: entry}})
			batch = batch[:0]
		}
	}
	if v := m.View(fsm.DefaultTenant); v.KeyCount() != keys {
		b.Fatalf("loaded %d keys, want %d", v.KeyCount(), keys)
	}
	return m, value
}

// BenchmarkApplyBesideBigReads isolates what a long read does to Apply at
// the state machine: 100,000 keys under one prefix, a reader reading it
// whole back to back in pages of up to 10,000 keys bounded as a reply is
// (what handleGet does, without JSON or NATS), and one put after another,
// applyPause apart, each apply timed, lock wait included.
// "reads-locked" reads under the state's read lock, as every read did
// before views; "reads-on-view" reads a view, as a listing does now;
// "no-reads" is the baseline. Reported: Apply's p50 and p99 in
// microseconds and the pages read meanwhile.
func BenchmarkApplyBesideBigReads(b *testing.B) {
	m, value := loadPrefix(b, 100_000)
	index := m.Applied.Get() // the next entries follow the load's
	for _, mode := range []string{"no-reads", "reads-locked", "reads-on-view"} {
		b.Run(mode, func(b *testing.B) {
			stop := make(chan struct{})
			var pages atomic.Int64
			var wg sync.WaitGroup
			readErr := make(chan error, 1)
			if mode != "no-reads" {
				wg.Add(1)
				go func() {
					defer wg.Done()
					q := fsm.GetQuery{Key: "r.", IsPrefix: true, Limit: 10_000, MaxBytes: (1 << 20) - decode.ReplyHeadroom}
					for {
						select {
						case <-stop:
							return
						default:
						}
						var reply *schema.KVGetReply
						if mode == "reads-locked" {
							m.Read(func(st *fsm.State) { reply = st.Get(q, st.Now()) })
						} else {
							v := m.View(fsm.DefaultTenant)
							reply = v.Get(q, v.Now())
						}
						if reply.Count == 0 || len(reply.KVs) == 0 {
							readErr <- fmt.Errorf("a page after %q: %d of %d keys", q.After, len(reply.KVs), reply.Count)
							return
						}
						pages.Add(1)
						q.After = reply.KVs[len(reply.KVs)-1].Key
						if !reply.More {
							q.After = ""
						}
					}
				}()
			}
			entries := make([][]byte, b.N)
			for i := range entries {
				data, err := fsm.Encode(1000, &fsm.Put{Key: fmt.Sprintf("w.%s.%09d", mode, i), Value: value})
				if err != nil {
					b.Fatal(err)
				}
				entries[i] = data
			}
			lat := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range entries {
				// A pause between puts, as between Raft's batches, so
				// that the reader gets its share and the puts span the
				// reads; only the apply is timed, lock wait included.
				time.Sleep(applyPause)
				index++
				t0 := time.Now()
				m.ApplyBatch([]*raft.Log{{Type: raft.LogCommand, Index: index, Data: entries[i]}})
				lat[i] = time.Since(t0)
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			select {
			case err := <-readErr:
				b.Fatal(err)
			default:
			}
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(int(p*float64(len(lat))), len(lat)-1)]) / float64(time.Microsecond)
			}
			b.ReportMetric(pct(0.50), "apply-p50-µs")
			b.ReportMetric(pct(0.99), "apply-p99-µs")
			b.ReportMetric(float64(pages.Load()), "pages-read")
		})
	}
}

// The tenant policy follows the applies that change it, and views and
// reads of each tenant are its own.
func TestStateMachineTenantPolicyAndViews(t *testing.T) {
	m := NewStateMachine(func(uint64, string, []schema.Event) {})
	entry := func(index uint64, tenant string, body any) *raft.Log {
		data, err := fsm.EncodeFor(1000, tenant, "", body)
		if err != nil {
			t.Fatal(err)
		}
		return &raft.Log{Type: raft.LogCommand, Index: index, Data: data}
	}
	before := m.TenantPolicy()
	m.ApplyBatch([]*raft.Log{entry(1, "A", &fsm.Put{Key: "k", Value: json.RawMessage(`"A"`)})})
	if m.TenantPolicy() != before {
		t.Fatal("a put took a new policy")
	}
	m.ApplyBatch([]*raft.Log{entry(2, "", &fsm.SetQuota{Tenant: "A", Quota: fsm.Quota{RequestsPerSecond: 7}})})
	if got := m.TenantPolicy().QuotaOf("A").RequestsPerSecond; got != 7 {
		t.Fatalf("the policy after a quota: rate %d", got)
	}
	m.ApplyBatch([]*raft.Log{entry(3, "", &fsm.TenantMove{Tenant: "A", Phase: fsm.MoveFence, To: "c2"})})
	if m.TenantPolicy().Refusal("A") == nil || m.TenantPolicy().Refusal("B") != nil {
		t.Fatal("the policy after a fence does not refuse A alone")
	}
	if got := prefixKeys(m.View("A")); fmt.Sprint(got) != "[k]" {
		t.Fatalf("A's view: %v", got)
	}
	if got := prefixKeys(m.View(fsm.DefaultTenant)); len(got) != 0 {
		t.Fatalf("the default view shows A's keys: %v", got)
	}
}
