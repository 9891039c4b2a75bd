package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// After kill -9 and a restart, a lease keeps the remaining time it had at
// the last applied command: it is neither reset to its full ttl nor expired
// early, and its keys, the revision and the lease-id counter survive.
func TestKillAndRestartKeepsLeases(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	sent := time.Now()
	id := c.grant(8)
	c.put("live.a", "a", id)
	c.put("live.b", "b", id)
	c.ok(subjects.KVPut, `{"key":"live.ttl","value":1,"ttl":30}`, nil)
	rev := c.revision()
	time.Sleep(2500 * time.Millisecond) // at least two ticks record the clock

	n.kill()
	killedAt := time.Now()
	n.restart()
	downtime := time.Since(killedAt)
	c = connect(t, n.natsURL)

	info := c.info(id, true)
	if strings.Join(info.Keys, ",") != "live.a,live.b" {
		t.Fatalf("keys after restart: %v", info.Keys)
	}
	// Ticks run every second, so at least 1.5 s of the 2.5 s were recorded.
	if info.RemainingMS > 8000-1500 {
		t.Fatalf("remaining %d ms after restart: the lease was (nearly) reset to its ttl", info.RemainingMS)
	}
	if info.RemainingMS <= 0 {
		t.Fatal("lease has no time left after restart")
	}
	if got := c.revision(); got != rev {
		t.Fatalf("revision %d after restart, want %d", got, rev)
	}
	if next := c.grant(5); next <= id+1 { // id+1 went to the ttl key's anonymous lease
		t.Fatalf("lease id %d reused after restart", next)
	}

	w := c.watch("concord.watch.live.>")
	evs := w.waitFor(2, 15*time.Second)
	for _, e := range evs[:2] {
		if e.Cause != schema.CauseLeaseExpired {
			t.Fatalf("unexpected event %+v", e.Event)
		}
		if early := sent.Add(8 * time.Second).Sub(e.at); early > 0 {
			t.Fatalf("%s expired %s early", e.Key, early)
		}
		// The lease may gain the downtime plus one tick, never more.
		if late := e.at.Sub(sent.Add(8*time.Second + downtime + time.Second)); late > lateMargin {
			t.Fatalf("%s expired %s beyond ttl + downtime + tick", e.Key, late)
		}
	}
}

// A node restarted from snapshot + log has identical state.
func TestRestartFromSnapshotAndLog(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{flags: []string{"--snapshot-threshold", "300", "--snapshot-interval", "200ms", "--trailing-logs", "50"}})
	c := connect(t, n.natsURL)
	lease := c.grant(600)
	putMany(t, n, "snap.leased.", 1500, lease)
	for i := 0; i < 50; i++ {
		c.put(fmt.Sprintf("snap.plain.%03d", i), map[string]any{"i": i, "s": "<&>"}, 0)
		c.ok(subjects.KVPut, map[string]any{"key": fmt.Sprintf("snap.ttl.%03d", i), "value": i, "ttl": 600}, nil)
	}
	c.ok(subjects.KVDelete, `{"prefix":"snap.plain.04"}`, nil)
	checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		snaps := finishedSnapshots(n.dataDir)
		if len(snaps) == 0 {
			return fmt.Errorf("no snapshot yet")
		}
		return nil
	})
	c.put("snap.after", "written after the snapshot", 0) // lives only in the log
	kvsBefore, leasesBefore := c.fullState()

	n.kill()
	n.restart()
	c = connect(t, n.natsURL)
	kvsAfter, leasesAfter := c.fullState()

	strip := func(kvs []schema.KeyValue) []schema.KeyValue {
		out := append([]schema.KeyValue(nil), kvs...)
		for i := range out {
			out[i].RemainingMS = nil // time moves on
		}
		return out
	}
	if kvsAfter.Revision != kvsBefore.Revision || !reflect.DeepEqual(strip(kvsAfter.KVs), strip(kvsBefore.KVs)) {
		t.Fatalf("keys differ after restart: %d keys at %d before, %d at %d after", len(kvsBefore.KVs), kvsBefore.Revision, len(kvsAfter.KVs), kvsAfter.Revision)
	}
	if len(leasesAfter) != len(leasesBefore) {
		t.Fatalf("%d leases before, %d after", len(leasesBefore), len(leasesAfter))
	}
	for i := range leasesBefore {
		b, a := leasesBefore[i], leasesAfter[i]
		// The read before the kill measured at the leader's running clock;
		// the log had recorded that clock up to one tick (1 s) earlier, and
		// the restarted node resumes from the log: the lease may gain up to
		// that tick, never more.
		if a.RemainingMS > b.RemainingMS+1000 {
			t.Fatalf("lease %d gained more than a tick over a restart: %d ms before, %d after", b.ID, b.RemainingMS, a.RemainingMS)
		}
		a.RemainingMS, a.RemainingTTL, b.RemainingMS, b.RemainingTTL = 0, 0, 0, 0
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("lease differs: before %+v after %+v", b, a)
		}
	}
}

func TestGracefulStopAndRestart(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	c.put("keep.me", 1, 0)
	n.stop() // fails the test unless the exit status is 0
	n.restart()
	c = connect(t, n.natsURL)
	if g := c.get(map[string]any{"key": "keep.me"}); len(g.KVs) != 1 {
		t.Fatal("key lost over a graceful restart")
	}
}

func TestDataDirBelongsToOneNode(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	n.stop()
	args := append([]string(nil), n.args...)
	args = append(args, "--node-id", "other")
	out, err := newProc(t, time.Minute, binPath, args...).combinedOutput()
	if err == nil || !strings.Contains(string(out), `holds node "n1", not "other"`) {
		t.Fatalf("start with another node id: err %v, output:\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(n.dataDir, "wal", "wal-meta.db")); err != nil {
		t.Fatal(err)
	}
}
