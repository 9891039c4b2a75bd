package robustness

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/robustness/lazyfs"
)

// Power-cut scenarios: a single node whose data directory is on lazyfs, a
// filesystem that throws away, when the power is cut, whatever was not made
// durable by an fsync (file data by the file's, names by their directory's;
// or, in the ext4-like model, names by any fsync). kill -9 alone keeps the
// page cache and so proves nothing about fsync. Each scenario cuts the
// power, restarts the node on what survived, and checks that it starts and
// that every write it acknowledged is there.

// models are the durability models every scenario runs under.
var models = []lazyfs.Model{lazyfs.Strict, lazyfs.Ext4Ordered}

// powerDisk is a data directory on lazyfs that survives power cuts.
type powerDisk struct {
	t       *testing.T
	model   lazyfs.Model
	backing string
	mnt     string
	fs      *lazyfs.FS
}

func newPowerDisk(t *testing.T, model lazyfs.Model) *powerDisk {
	t.Helper()
	requireRoot(t)
	d := &powerDisk{t: t, model: model, backing: t.TempDir(), mnt: t.TempDir()}
	d.mount()
	t.Cleanup(func() {
		if d.fs != nil {
			if err := d.fs.Unmount(); err != nil {
				t.Errorf("unmount lazyfs: %v", err)
			}
		}
	})
	return d
}

func (d *powerDisk) mount() {
	d.t.Helper()
	fs, err := lazyfs.Mount(d.backing, d.mnt, d.model)
	if err != nil {
		d.t.Fatalf("mount lazyfs: %v", err)
	}
	d.fs = fs
}

// dataDir is the node's data directory on the disk.
func (d *powerDisk) dataDir() string { return filepath.Join(d.mnt, "data") }

// cut kills the node (it dies with the machine) and cuts the power, then
// mounts what survived.
func (d *powerDisk) cut(n *node) {
	d.t.Helper()
	n.kill()
	if err := d.fs.PowerCut(); err != nil {
		d.fs = nil
		d.t.Fatalf("power cut: %v", err)
	}
	d.fs = nil
	d.mount()
}

// A node whose power is cut within a second or two of its first start
// starts again. Releases before datadir.CheckNodeID synced node-id left it
// empty (its name made durable by the later sync of the directory for
// cluster-id) and refused to start: "data directory belongs to another
// node".
func TestPowerCutSoonAfterFirstStart(t *testing.T) {
	for _, model := range models {
		t.Run(model.String(), func(t *testing.T) {
			d := newPowerDisk(t, model)
			n := newNode(t, d.dataDir())
			n.start()
			n.waitServing(30 * time.Second)
			d.cut(n)
			n.start()
			n.waitServing(30 * time.Second)
		})
	}
}

// A node whose power is cut after it took snapshots and compacted its log
// starts again with every acknowledged write. hashicorp/raft's file
// snapshot store did not sync a new snapshot's directory before renaming
// it into place: on the strict model the cut left an empty snapshot
// directory, a log compacted past it, and a panic on every start.
func TestPowerCutAfterSnapshots(t *testing.T) {
	for _, model := range models {
		t.Run(model.String(), func(t *testing.T) {
			d := newPowerDisk(t, model)
			n := newNode(t, d.dataDir(), "--snapshot-threshold", "100", "--trailing-logs", "20")
			n.start()
			n.waitServing(30 * time.Second)
			w := newWriter(t, n.natsURL)
			for round := 0; round < 3; round++ {
				w.putN(fmt.Sprintf("snap.%d.", round), 150)
				if _, err := request(w.nc, "concord.cluster.snapshot", map[string]any{}, 30*time.Second); err != nil {
					t.Fatalf("snapshot %d: %v", round, err)
				}
			}
			w.putN("snap.tail.", 30)
			w.close()
			d.cut(n)
			n.start()
			n.waitServing(30 * time.Second)
			w.checkAcknowledged(n.natsURL)
		})
	}
}

// Writers put keys as fast as the node takes them; the power is cut at a
// random moment, twice (six times in the long profile). After each restart
// every put acknowledged in any round is there, with its value.
func TestPowerCutUnderLoad(t *testing.T) {
	for _, model := range models {
		t.Run(model.String(), func(t *testing.T) {
			d := newPowerDisk(t, model)
			n := newNode(t, d.dataDir(), "--snapshot-threshold", "500", "--trailing-logs", "100")
			n.start()
			n.waitServing(30 * time.Second)
			rounds := 2
			if longProfile() {
				rounds = 6
			}
			var acked []map[string]int
			for round := 0; round < rounds; round++ {
				w := newWriter(t, n.natsURL)
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for g := 0; g < 4; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						w.putUntil(fmt.Sprintf("load.%d.%d.", round, g), stop)
					}(g)
				}
				time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
				d.cut(n) // the writers see their connection drop
				close(stop)
				wg.Wait()
				w.close()
				if w.count() == 0 {
					t.Fatalf("round %d: no put was acknowledged before the cut", round)
				}
				acked = append(acked, w.acknowledged())
				n.start()
				n.waitServing(30 * time.Second)
				for _, a := range acked {
					checkKeys(t, n.natsURL, a)
				}
				t.Logf("round %d: %d acknowledged puts, all present after the cut", round, w.count())
			}
		})
	}
}

// writer puts keys and remembers what was acknowledged.
type writer struct {
	t  *testing.T
	nc *nats.Conn

	mu    sync.Mutex
	acked map[string]int
	seq   int
}

func newWriter(t *testing.T, url string) *writer {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	return &writer{t: t, nc: nc, acked: map[string]int{}}
}

func (w *writer) close() { w.nc.Close() }

// put puts key = v and records it once acknowledged.
func (w *writer) put(key string, v int, timeout time.Duration) error {
	if _, err := request(w.nc, "concord.kv.put", map[string]any{"key": key, "value": v}, timeout); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	w.mu.Lock()
	w.acked[key] = v
	w.mu.Unlock()
	return nil
}

// putN puts n keys under prefix, each of which must succeed.
func (w *writer) putN(prefix string, n int) {
	w.t.Helper()
	for i := 0; i < n; i++ {
		if err := w.put(fmt.Sprintf("%s%05d", prefix, i), i, 10*time.Second); err != nil {
			w.t.Fatal(err)
		}
	}
}

// putUntil puts keys under prefix until stop is closed or a put fails (the
// node died); failures are not acknowledgements and are not checked.
func (w *writer) putUntil(prefix string, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if w.put(fmt.Sprintf("%s%06d", prefix, i), i, 2*time.Second) != nil {
			return
		}
	}
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writer) acknowledged() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.acked))
	for k, v := range w.acked {
		out[k] = v
	}
	return out
}

// checkAcknowledged checks every acknowledged put against the node at url.
func (w *writer) checkAcknowledged(url string) {
	w.t.Helper()
	checkKeys(w.t, url, w.acknowledged())
}

// checkKeys reads every key of want from the node and fails on one that is
// missing or holds another value.
func checkKeys(t *testing.T, url string, want map[string]int) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for key, v := range want {
		data, err := request(nc, "concord.kv.get", map[string]any{"key": key}, 10*time.Second)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		var r schema.KVGetReply
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.KVs) != 1 || string(r.KVs[0].Value) != fmt.Sprint(v) {
			t.Fatalf("acknowledged put %s = %d lost after the power cut: read %s", key, v, data)
		}
	}
}

// Power cuts of a 3-node cluster under the checked workload of the network
// scenarios (faultWorkload: linearizable history with the final reads,
// watchers, leases never early, replicas identical), each node's data on
// a lazyfs disk of its own (n2's ext4-like, the others strict): the
// leader's power cut at a random moment, then a follower's, then every
// node's at once; each time the nodes restart on what survived. Once in
// the short profile, three rounds in the long one.
func TestPowerCutsUnderCheckedLoad(t *testing.T) {
	f := startPowerLab(t, binPath)
	w := startFaultWorkload(t, f.lab, f.c)
	rounds := 1
	if longProfile() {
		rounds = 3
	}
	cut := func(t *testing.T, hosts ...string) {
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
		at := time.Now()
		for _, h := range hosts {
			f.disks[h].cut(f.c.nodes[h])
		}
		for _, h := range hosts {
			f.c.nodes[h].start()
		}
		recovery := w.recover(t, f.c, at)
		t.Logf("power cut of %s: served again through every server %s after the cut", strings.Join(hosts, ", "), recovery.Round(100*time.Millisecond))
		w.report = append(w.report, fmt.Sprintf("power cut of %s: recovered %s after the cut", strings.Join(hosts, ", "), recovery.Round(100*time.Millisecond)))
	}
	for round := 0; round < rounds && !t.Failed(); round++ {
		t.Run("leader", func(t *testing.T) {
			leader, _ := f.c.roles(60 * time.Second)
			cut(t, leader)
		})
		t.Run("follower", func(t *testing.T) {
			_, followers := f.c.roles(60 * time.Second)
			cut(t, followers[rand.IntN(len(followers))])
		})
		t.Run("every node", func(t *testing.T) {
			f.c.roles(60 * time.Second)
			cut(t, f.c.names...)
		})
	}
	w.stop()
	w.check(t, f.c)
}
