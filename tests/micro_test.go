package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// microData is the `data` Concord puts in each endpoint's micro stats: the
// counts its workers keep, which, unlike micro's own, see error replies.
type microData struct {
	Requests              uint64            `json:"num_requests"`
	NumErrors             uint64            `json:"num_errors"`
	Errors                map[string]uint64 `json:"errors"`
	ProcessingTime        int64             `json:"processing_time"`
	AverageProcessingTime int64             `json:"average_processing_time"`
}

// natsMicro runs `nats --server url micro args... --json` with no user
// configuration and decodes its output into out. It returns the error of a
// failed run (such as "no service instances found") with its stderr.
func natsMicro(t *testing.T, url string, out any, args ...string) error {
	t.Helper()
	home := t.TempDir()
	p := newProc(t, 30*time.Second, "nats", append([]string{"--server", url, "--timeout", "2s", "micro"}, append(args, "--json")...)...)
	p.cmd.Env = append(p.cmd.Env, "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=", "NATS_URL=")
	var stdout, stderr bytes.Buffer
	p.cmd.Stdout, p.cmd.Stderr = &stdout, &stderr
	if err := p.run(); err != nil {
		return fmt.Errorf("nats micro %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("nats micro %s printed %q: %v", strings.Join(args, " "), stdout.String(), err)
	}
	return nil
}

// microStats returns the single instance's stats, by endpoint: micro's own
// and Concord's data.
func microStats(t *testing.T, url string) (map[subjects.Endpoint]*micro.EndpointStats, map[subjects.Endpoint]microData) {
	t.Helper()
	var stats []micro.Stats
	if err := natsMicro(t, url, &stats, "stats", "concord"); err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 {
		t.Fatalf("%d instances in nats micro stats, want 1", len(stats))
	}
	own := map[subjects.Endpoint]*micro.EndpointStats{}
	data := map[subjects.Endpoint]microData{}
	for _, e := range stats[0].Endpoints {
		ep := subjects.Endpoint(strings.TrimPrefix(e.Subject, "concord."))
		var d microData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatalf("stats data of %s: %s: %v", e.Subject, e.Data, err)
		}
		own[ep], data[ep] = e, d
	}
	return own, data
}

// The leader is a NATS micro service: `nats micro info` shows the binary's
// version, every request endpoint with its subject and the ids of its JSON
// Schemas, and `nats micro stats` counts requests and error replies.
func TestMicroDiscovery(t *testing.T) {
	t.Parallel()
	natsCLI(t)
	out, err := newProc(t, 30*time.Second, binPath, "version").output()
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(out))
	n := startNode(t, nodeOpts{})

	var list []micro.Info
	if err := natsMicro(t, n.natsURL, &list, "ls"); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "concord" || list[0].Version != version {
		t.Fatalf("nats micro ls: %+v, want one concord %s", list, version)
	}

	var info struct {
		Info  micro.Info  `json:"info"`
		Stats micro.Stats `json:"stats"`
	}
	if err := natsMicro(t, n.natsURL, &info, "info", "concord"); err != nil {
		t.Fatal(err)
	}
	nfo := info.Info
	if nfo.Name != "concord" || nfo.Version != version || nfo.Description == "" ||
		nfo.Metadata["node_id"] != "n1" || nfo.Metadata["subject_prefix"] != "concord" {
		t.Fatalf("nats micro info: %+v", nfo)
	}
	byEndpoint := map[subjects.Endpoint]micro.EndpointInfo{}
	for _, e := range nfo.Endpoints {
		byEndpoint[subjects.Endpoint(strings.TrimPrefix(e.Subject, "concord."))] = e
	}
	if len(nfo.Endpoints) != len(subjects.Endpoints) || len(byEndpoint) != len(subjects.Endpoints) {
		t.Fatalf("%d endpoints listed, want the %d of subjects.Endpoints: %+v", len(nfo.Endpoints), len(subjects.Endpoints), nfo.Endpoints)
	}
	// The endpoints of the keyspace's past, by name, as well as through
	// subjects.Endpoints below.
	for _, name := range []string{"kv_history", "kv_compact"} {
		found := false
		for _, e := range nfo.Endpoints {
			found = found || e.Name == name && e.Subject == "concord."+strings.ReplaceAll(name, "_", ".")
		}
		if !found {
			t.Errorf("nats micro info lists no endpoint %s: %+v", name, nfo.Endpoints)
		}
	}
	for _, ep := range subjects.Endpoints {
		e, ok := byEndpoint[ep]
		if !ok {
			t.Errorf("endpoint %s is not listed", ep)
			continue
		}
		if e.Subject != "concord."+string(ep) || e.QueueGroup != "concord" {
			t.Errorf("endpoint %s: subject %q, queue group %q", ep, e.Subject, e.QueueGroup)
		}
		// Each metadata entry is the $id of the embedded schema of that name.
		for key, name := range map[string]string{"request_schema": string(ep) + ".request", "reply_schema": string(ep) + ".reply", "error_schema": "error"} {
			raw, ok := schema.Raw(name)
			if !ok {
				t.Fatalf("no schema %s", name)
			}
			var doc struct {
				ID string `json:"$id"`
			}
			mustUnmarshal(t, raw, &doc)
			if e.Metadata[key] != doc.ID || doc.ID == "" {
				t.Errorf("endpoint %s: %s = %q, want %q (the $id of %s.json)", ep, key, e.Metadata[key], doc.ID, name)
			}
		}
	}

	// A scripted workload moves exactly its endpoints' counts. The counts
	// are taken just after each reply is sent, so poll for them.
	own0, before := microStats(t, n.natsURL)
	c := connect(t, n.natsURL)
	for i := 0; i < 3; i++ {
		c.grant(30)
	}
	c.fails(subjects.KVPut, `{"key":"a..b","value":1}`, schema.ErrInvalidRequest)
	var own map[subjects.Endpoint]*micro.EndpointStats
	checkFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		var after map[subjects.Endpoint]microData
		own, after = microStats(t, n.natsURL)
		for _, ep := range subjects.Endpoints {
			b, a := before[ep], after[ep]
			wantReq, wantErr := uint64(0), uint64(0)
			switch ep {
			case subjects.LeaseGrant:
				wantReq = 3
			case subjects.KVPut:
				wantReq, wantErr = 1, 1
			}
			if a.Requests-b.Requests != wantReq || a.NumErrors-b.NumErrors != wantErr ||
				a.Errors[schema.ErrInvalidRequest]-b.Errors[schema.ErrInvalidRequest] != wantErr {
				return fmt.Errorf("%s: %+v after %+v, want +%d requests, +%d invalid_request", ep, a, b, wantReq, wantErr)
			}
			if wantReq > 0 && (a.ProcessingTime <= b.ProcessingTime || a.AverageProcessingTime <= 0) {
				return fmt.Errorf("%s: processing time %d after %d", ep, a.ProcessingTime, b.ProcessingTime)
			}
		}
		return nil
	})
	// micro's own counts see the hand-off to a worker only: the requests,
	// but never an error reply.
	if d := own[subjects.LeaseGrant].NumRequests - own0[subjects.LeaseGrant].NumRequests; d != 3 {
		t.Errorf("micro's num_requests on lease.grant moved by %d, want 3", d)
	}
	if own[subjects.KVPut].NumErrors != 0 {
		t.Errorf("micro's num_errors on kv.put is %d; the workers' errors should be in data only", own[subjects.KVPut].NumErrors)
	}
}

// Only the leader registers the service: one instance, the leader's; after
// the leader dies, the new leader's instance replaces it.
func TestMicroClusterLeaderOnly(t *testing.T) {
	t.Parallel()
	natsCLI(t)
	c := startCluster(t, 3)
	nc := c.conn()
	url := strings.Join(c.urls, ",")

	// instance waits until exactly one instance is listed, run by want
	// (if not empty), and returns its node id.
	instance := func(want string, unlike string) string {
		t.Helper()
		var id string
		checkFor(t, 30*time.Second, 100*time.Millisecond, func() error {
			var list []micro.Info
			if err := natsMicro(t, url, &list, "ls", "concord"); err != nil {
				return err // none during an election
			}
			if len(list) != 1 {
				return fmt.Errorf("%d instances listed: %+v", len(list), list)
			}
			id = list[0].Metadata["node_id"]
			if (want != "" && id != want) || id == unlike {
				return fmt.Errorf("the instance is %s's, want %q, not %q", id, want, unlike)
			}
			return nil
		})
		return id
	}

	leader := c.leaderIndex(nc)
	old := fmt.Sprintf("n%d", leader+1)
	instance(old, "")

	c.nodes[leader].kill()
	next := instance("", old)
	// The new instance is the new leader's.
	checkFor(t, 20*time.Second, 100*time.Millisecond, func() error {
		st, err := c.status(nc, false)
		if err != nil {
			return err
		}
		if st.Leader != next {
			return fmt.Errorf("leader %s, instance %s", st.Leader, next)
		}
		return nil
	})
	instance(next, old)
}
