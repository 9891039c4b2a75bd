package metrics

import (
	"testing"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestGoMetricsSinkSeries(t *testing.T) {
	s := newGoMetricsSink()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	s.IncrCounter([]string{"raft", "apply"}, 2)
	s.IncrCounter([]string{"raft", "apply"}, 3)
	s.IncrCounter([]string{"raft", "apply"}, -1) // dropped: counters only go up
	s.SetGauge([]string{"raft", "peers"}, 3)
	s.SetPrecisionGauge([]string{"raft", "peers"}, 2.5)
	s.AddSample([]string{"raft", "commitTime"}, 1.5)
	s.AddSample([]string{"raft", "commitTime"}, 0.5)
	s.AddSampleWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, 4, []gometrics.Label{{Name: "peer_id", Value: "n2"}})
	s.AddSampleWithLabels([]string{"raft", "replication", "appendEntries", "rpc"}, 6, []gometrics.Label{{Name: "peer_id", Value: "n3"}})
	s.IncrCounter([]string{"raft", "fsm", "snapshot", "persist", "count"}, 1) // more than four parts
	s.EmitKey([]string{"raft", "ignored"}, 1)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, f := range families {
		got[f.GetName()] = f
	}
	if len(got) != 5 {
		t.Fatalf("families %v", keys(got))
	}
	if v := got["raft_apply"].GetMetric()[0].GetCounter().GetValue(); v != 5 {
		t.Errorf("raft_apply %v, want 5", v)
	}
	if v := got["raft_peers"].GetMetric()[0].GetGauge().GetValue(); v != 2.5 {
		t.Errorf("raft_peers %v, want 2.5", v)
	}
	if sm := got["raft_commitTime"].GetMetric()[0].GetSummary(); sm.GetSampleCount() != 2 || sm.GetSampleSum() != 2 {
		t.Errorf("raft_commitTime count %d sum %v", sm.GetSampleCount(), sm.GetSampleSum())
	}
	rpc := got["raft_replication_appendEntries_rpc"].GetMetric()
	if len(rpc) != 2 {
		t.Fatalf("labelled series: %v", rpc)
	}
	for _, m := range rpc {
		if l := m.GetLabel(); len(l) != 1 || l[0].GetName() != "peer_id" {
			t.Errorf("labels %v", l)
		}
	}
	if v := got["raft_fsm_snapshot_persist_count"].GetMetric()[0].GetCounter().GetValue(); v != 1 {
		t.Errorf("long key %v", v)
	}
}

// The point of the sink: a short key without labels is counted without
// allocating (raft counts every Apply).
func TestGoMetricsSinkHotPathDoesNotAllocate(t *testing.T) {
	s := newGoMetricsSink()
	key := []string{"raft", "apply"}
	sample := []string{"raft", "leader", "dispatchLog"}
	s.IncrCounter(key, 1)
	s.AddSample(sample, 1)
	if n := testing.AllocsPerRun(1000, func() {
		s.IncrCounter(key, 1)
		s.AddSample(sample, 0.25)
	}); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}

func keys(m map[string]*dto.MetricFamily) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
