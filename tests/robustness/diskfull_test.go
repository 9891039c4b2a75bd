package robustness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sys/unix"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/freeport"
)

// Disk-full scenarios: a single node whose data directory is a small
// tmpfs, filled by its own values and by a filler file. Each checks that a
// write that cannot be kept gets a clear error at once and changes
// nothing, that reads and keep-alives go on with the node still leader,
// that writes resume by themselves once space is freed, that the metric
// and one log line each way say so, and that every acknowledged write is
// there, also after a restart.

// smallDisk mounts a tmpfs of size (such as "24m") for the scenario and
// unmounts it in cleanup.
func smallDisk(t *testing.T, size string) string {
	t.Helper()
	requireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Fatalf("mount a %s tmpfs: %v", size, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// writeFile writes n bytes to path, as far as the disk lets it.
func writeFile(path string, n int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for n > 0 {
		k, err := f.Write(chunk[:min(int64(len(chunk)), n)])
		n -= int64(k)
		if err != nil {
			return err
		}
	}
	return nil
}

// reply sends body to subject and splits the answer into its body and its
// error reply, if it is one.
func reply(nc *nats.Conn, subject string, body any) ([]byte, *schema.Error, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, nil, err
	}
	msg, err := nc.Request(subject, data, 10*time.Second)
	if err != nil {
		return nil, nil, err
	}
	if msg.Header.Get(schema.HeaderErrorCode) == "" {
		return msg.Data, nil, nil
	}
	var r schema.ErrorReply
	if err := json.Unmarshal(msg.Data, &r); err != nil || r.Error == nil {
		return nil, nil, fmt.Errorf("undecodable error reply %q", msg.Data)
	}
	return nil, r.Error, nil
}

// scrape returns the value of a gauge on the node's /metrics.
func scrape(t *testing.T, addr, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return ""
}

// diskFullRun is the state of one scenario: the node, its client, the
// puts it acknowledged and a lease kept alive throughout.
type diskFullRun struct {
	t     *testing.T
	n     *node
	nc    *nats.Conn
	http  string
	lease int64
	acked map[string]string
	// refused are the keys of puts answered disk_full, which says that
	// nothing changed: none may ever be there.
	refused []string
	seq     int
}

func startDiskFullRun(t *testing.T, disk string) *diskFullRun {
	t.Helper()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	n := newNode(t, filepath.Join(disk, "data"), "--wal-segment-mb", "1", "--metrics-listen", httpAddr)
	n.start()
	n.waitServing(30 * time.Second)
	nc, err := nats.Connect(n.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r := &diskFullRun{t: t, n: n, nc: nc, http: httpAddr, acked: map[string]string{}}
	data, e, err := reply(nc, "concord.lease.grant", map[string]any{"ttl": 30})
	if err != nil || e != nil {
		t.Fatalf("grant: %v %v", err, e)
	}
	var g struct{ ID int64 }
	json.Unmarshal(data, &g)
	r.lease = g.ID
	return r
}

// putUntilRefused puts 32 KiB values until one is refused, and returns
// the refusal and how long it took to come.
func (r *diskFullRun) putUntilRefused(limit int) (*schema.Error, time.Duration) {
	r.t.Helper()
	for i := 0; i < limit; i++ {
		r.seq++
		key := fmt.Sprintf("fill.%05d", r.seq)
		value := fmt.Sprintf("%05d-%s", r.seq, strings.Repeat("v", 32<<10))
		start := time.Now()
		_, e, err := reply(r.nc, "concord.kv.put", map[string]any{"key": key, "value": value})
		if err != nil {
			r.t.Fatalf("put %s: %v", key, err)
		}
		if e != nil {
			r.refused = append(r.refused, key)
			return e, time.Since(start)
		}
		r.acked[key] = value
	}
	r.t.Fatalf("%d puts of 32 KiB fit on the small disk", limit)
	return nil, 0
}

// whileFull checks what still works on a full disk: reads, a keep-alive,
// a delete, and the node still leading; and the gauge.
func (r *diskFullRun) whileFull() {
	r.t.Helper()
	for key, value := range r.acked {
		data, e, err := reply(r.nc, "concord.kv.get", map[string]any{"key": key})
		if err != nil || e != nil || !strings.Contains(string(data), value[:5]) {
			r.t.Fatalf("read %s on a full disk: %v %v", key, err, e)
		}
		break
	}
	if _, e, err := reply(r.nc, "concord.lease.keepalive", map[string]any{"id": r.lease}); err != nil || e != nil {
		r.t.Fatalf("keep-alive on a full disk: %v %v", err, e)
	}
	if err := r.n.ping(); err != nil {
		r.t.Fatalf("the node stopped leading on a full disk: %v", err)
	}
	if v := scrape(r.t, r.http, "concord_disk_full"); v != "1" {
		r.t.Fatalf("concord_disk_full = %s on a full disk", v)
	}
}

// resumes frees space with free and waits for a put to land, retrying
// while refused disk_full; it returns how long that took.
func (r *diskFullRun) resumes(free func()) time.Duration {
	r.t.Helper()
	free()
	start := time.Now()
	for {
		r.seq++
		key := fmt.Sprintf("after.%05d", r.seq)
		_, e, err := reply(r.nc, "concord.kv.put", map[string]any{"key": key, "value": "x"})
		if err != nil {
			r.t.Fatalf("put after freeing space: %v", err)
		}
		if e == nil {
			r.acked[key] = "x"
			break
		}
		if e.Name != schema.ErrDiskFull {
			r.t.Fatalf("put after freeing space: %+v", e)
		}
		r.refused = append(r.refused, key)
		if time.Since(start) > 15*time.Second {
			r.t.Fatalf("writes did not resume within 15 s of freeing space: %s", e.Description)
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	if v := scrape(r.t, r.http, "concord_disk_full"); v != "0" {
		r.t.Fatalf("concord_disk_full = %s after writes resumed", v)
	}
	return took
}

// checkAcked reads every acknowledged put back, and finds none of the
// refused ones.
func (r *diskFullRun) checkAcked() {
	r.t.Helper()
	for _, key := range r.refused {
		data, e, err := reply(r.nc, "concord.kv.get", map[string]any{"key": key})
		if err != nil || e != nil {
			r.t.Fatalf("read %s: %v %v", key, err, e)
		}
		var got schema.KVGetReply
		if err := json.Unmarshal(data, &got); err != nil {
			r.t.Fatal(err)
		}
		if len(got.KVs) != 0 {
			r.t.Fatalf("%s was refused disk_full (nothing changed) and is there: %.80s", key, data)
		}
	}
	for key, value := range r.acked {
		data, e, err := reply(r.nc, "concord.kv.get", map[string]any{"key": key})
		if err != nil || e != nil {
			r.t.Fatalf("read %s: %v %v", key, err, e)
		}
		if !strings.Contains(string(data), value[:1]) || (len(value) > 5 && !strings.Contains(string(data), value[:5])) {
			r.t.Fatalf("%s lost: read %.80s", key, data)
		}
	}
}

func checkRefusal(t *testing.T, e *schema.Error, took time.Duration) {
	t.Helper()
	if e.Code != 507 || e.Name != schema.ErrDiskFull || !strings.Contains(e.Description, "disk is full") {
		t.Fatalf("refused put: %+v; want 507 disk_full naming the full disk", e)
	}
	if took > 2*time.Second {
		t.Fatalf("the refusal took %s", took)
	}
}

// TestDiskFullByValuesAndFiller fills the node's disk with its own values
// (a ballast file, which the operator deletes, stands for whatever else
// can be freed), then, once writes resume, with a filler file.
func TestDiskFullByValuesAndFiller(t *testing.T) {
	disk := smallDisk(t, "24m")
	ballast := filepath.Join(disk, "ballast")
	if err := writeFile(ballast, 6<<20); err != nil {
		t.Fatal(err)
	}
	r := startDiskFullRun(t, disk)

	// Filled by values.
	e, took := r.putUntilRefused(2000)
	checkRefusal(t, e, took)
	t.Logf("full after %d acknowledged puts of 32 KiB: %s (in %s)", len(r.acked), e.Description, took.Round(time.Millisecond))
	r.whileFull()
	if _, e, err := reply(r.nc, "concord.kv.delete", map[string]any{"key": "fill.00001"}); err != nil || e != nil {
		t.Fatalf("delete on a full disk: %v %v", err, e)
	}
	delete(r.acked, "fill.00001")
	resumed := r.resumes(func() { os.Remove(ballast) })
	t.Logf("writes resumed %s after the ballast was removed", resumed.Round(time.Millisecond))

	// Filled by a filler file, as far as the disk lets it.
	filler := filepath.Join(disk, "filler")
	if err := writeFile(filler, 64<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filler: %v; want ENOSPC", err)
	}
	e, took = r.putUntilRefused(200)
	checkRefusal(t, e, took)
	r.whileFull()
	resumed = r.resumes(func() { os.Remove(filler) })
	t.Logf("writes resumed %s after the filler was removed", resumed.Round(time.Millisecond))
	r.checkAcked()

	// One log line each way per episode, not one per refusal.
	b, _ := os.ReadFile(r.n.logPath)
	full, room := strings.Count(string(b), "disk is full: this node takes no new"), strings.Count(string(b), "has room again")
	if full != 2 || room != 2 {
		t.Fatalf("the log says the disk is full %d times and has room %d times; want 2 and 2", full, room)
	}

	// Everything acknowledged survives a restart.
	r.n.kill()
	r.n.start()
	r.n.waitServing(30 * time.Second)
	r.checkAcked()
	t.Logf("%d acknowledged puts, all present after a restart", len(r.acked))
}
