package main

import (
	"strings"
	"testing"
)

// parseMetrics keeps the unlabelled samples of an exposition and skips
// comments and labelled ones; a malformed sample is an error.
func TestParseMetrics(t *testing.T) {
	text := `# HELP concord_snapshot_persist_duration_seconds Time to write a Raft snapshot of the state.
# TYPE concord_snapshot_persist_duration_seconds histogram
concord_snapshot_persist_duration_seconds_bucket{le="0.005"} 1
concord_snapshot_persist_duration_seconds_sum 1.25
concord_snapshot_persist_duration_seconds_count 3

concord_snapshot_bytes 2.097152e+06
`
	got, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[metricSnapshotSum] != 1.25 || got[metricSnapshotCount] != 3 || got[metricSnapshotBytes] != 2<<20 {
		t.Errorf("parseMetrics: %v", got)
	}
	for _, bad := range []string{"concord_snapshot_bytes\n", "concord_snapshot_bytes many\n"} {
		if _, err := parseMetrics(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "concord_snapshot_bytes") {
			t.Errorf("parseMetrics(%q): %v, want an error naming the line", bad, err)
		}
	}
}
