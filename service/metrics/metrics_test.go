package metrics

import (
	"testing"

	"github.com/hashicorp/raft"

	"github.com/concord-io/concord/fsm"
)

// stateSource is a Source over a state machine, with nothing else.
type stateSource struct{ st *fsm.State }

func (s stateSource) ReadState(f func(*fsm.State))     { f(s.st) }
func (stateSource) AppliedIndex() uint64               { return 0 }
func (stateSource) BatchEntries() uint64               { return 0 }
func (stateSource) Raft() *raft.Raft                   { return nil }
func (stateSource) Batching() bool                     { return false }
func (stateSource) LeaseClockRunning() bool            { return false }
func (stateSource) DataDir() string                    { return "." }
func (stateSource) SnapshotDebt() (debt, dueAt uint64) { return 0, 0 }

// concord_lease_limit is the limit in force, the replicated one, not a
// node's own flag: a follower started with another --max-leases reports
// what the leader set, which is what refuses grants.
func TestLeaseLimitIsTheReplicatedOne(t *testing.T) {
	st := fsm.New()
	cmd, err := fsm.Encode(0, &fsm.Limits{MaxLeases: 7, MaxKeysPerLease: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r := st.Apply(cmd); r.Err != nil {
		t.Fatalf("set limits: %v", r.Err)
	}
	fams, err := New(stateSource{st}, 10).Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "concord_lease_limit" {
			if got := f.GetMetric()[0].GetGauge().GetValue(); got != 7 {
				t.Fatalf("concord_lease_limit = %v, want the 7 in force", got)
			}
			return
		}
	}
	t.Fatal("concord_lease_limit not exported")
}
