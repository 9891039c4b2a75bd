package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"
)

// concord bench runs every workload against a node and reports results
// with no errors; the figures themselves are for people, not asserts.
func TestBenchSmoke(t *testing.T) {
	n := startNode(t, nodeOpts{})
	out, err := exec.Command(binPath, "bench", "--url", n.natsURL, "--json", "--duration", "300ms", "--clients", "2",
		"--revoke-keys", "50", "--expiry-leases", "5", "--expiry-ttl", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("concord bench: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var r struct {
			Workload string             `json:"workload"`
			Ops      int64              `json:"ops"`
			Errors   int64              `json:"errors"`
			Extra    map[string]float64 `json:"extra"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		seen[r.Workload] = true
		if r.Ops < 1 || r.Errors != 0 {
			t.Errorf("%s: %d ops, %d errors", r.Workload, r.Ops, r.Errors)
		}
		switch r.Workload {
		case "revoke":
			if r.Extra["keys"] != 50 || r.Extra["last_event_ms"] <= 0 {
				t.Errorf("revoke: %v", r.Extra)
			}
		case "expiry":
			if r.Extra["early"] != 0 || r.Extra["missing"] != 0 {
				t.Errorf("expiry: %v", r.Extra)
			}
		}
	}
	for _, w := range []string{"grant", "put", "keepalive", "get", "txn", "revoke", "expiry"} {
		if !seen[w] {
			t.Errorf("no result for %s in:\n%s", w, out)
		}
	}
}
