package serving

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/internal/testnats"
	"github.com/concord-io/concord/subjects"
)

// microName is the rule micro applies to service and endpoint names.
var microName = regexp.MustCompile(`^[A-Za-z0-9\-_]+$`)

func TestMicroVersion(t *testing.T) {
	for in, want := range map[string]string{
		"":                    "0.0.0-dev",
		"0.0.0-dev":           "0.0.0-dev",
		"1.2.3":               "1.2.3",
		"v1.2.3":              "1.2.3",
		"v1.2.3-4-gabcdef0":   "1.2.3-4-gabcdef0",
		"1.2.3+build.7":       "1.2.3+build.7",
		"dev":                 "0.0.0-unknown",
		"1.2":                 "0.0.0-unknown",
		"vv1.2.3":             "0.0.0-unknown",
		"1.2.3-01 (modified)": "0.0.0-unknown",
	} {
		got, ok := microVersion(in)
		if got != want || ok != (want != "0.0.0-unknown") {
			t.Errorf("microVersion(%q) = %q, %v; want %q", in, got, ok, want)
		}
		if !semVer.MatchString(got) {
			t.Errorf("microVersion(%q) = %q is not a semantic version", in, got)
		}
	}
}

// TestMicroEndpointsMatchHandlers keeps subjects.Endpoints (the order and
// the counters), the handlers and the JSON Schemas in step.
func TestMicroEndpointsMatchHandlers(t *testing.T) {
	hs := (&Server{}).handlers()
	if len(hs) != len(subjects.Endpoints) {
		t.Fatalf("%d handlers, %d subjects.Endpoints", len(hs), len(subjects.Endpoints))
	}
	names := map[string]bool{}
	for _, ep := range subjects.Endpoints {
		if _, ok := hs[ep]; !ok {
			t.Errorf("no handler for %s", ep)
		}
		name := ep.Name()
		if !microName.MatchString(name) || names[name] {
			t.Errorf("endpoint name %q of %s is invalid or taken", name, ep)
		}
		names[name] = true
		for _, kind := range []string{"request", "reply"} {
			if _, ok := schema.Raw(string(ep) + "." + kind); !ok {
				t.Errorf("no %s schema for %s", kind, ep)
			}
		}
	}
}

func TestEndpointStatsConcurrent(t *testing.T) {
	rs := newRequestStats(subjects.Endpoints)
	const workers, each = 8, 1000
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var e *schema.Error
				switch i % 4 {
				case 1:
					e = schema.Errorf(schema.ErrInvalidRequest, "bad")
				case 2:
					e = &schema.Error{Code: 599, Name: "not_in_the_table"}
				}
				rs.observe(subjects.KVPut, time.Microsecond, e)
				_ = rs.snapshot(subjects.KVPut) // reads race with writes
			}
		}()
	}
	rs.observe("no.such.endpoint", time.Second, nil) // ignored
	wg.Wait()
	got := rs.snapshot(subjects.KVPut)
	n := uint64(workers * each)
	if got.Requests != n || got.NumErrors != n/2 || got.Errors[schema.ErrInvalidRequest] != n/4 || got.Errors[schema.ErrInternal] != n/4 ||
		got.ProcessingTime != time.Duration(n)*time.Microsecond || got.AverageProcessingTime != time.Microsecond {
		t.Fatalf("snapshot %+v", got)
	}
	if zero := rs.snapshot(subjects.KVGet); zero.Requests != 0 || zero.Errors == nil {
		t.Fatalf("untouched endpoint: %+v", zero)
	}
	b, _ := json.Marshal(got)
	want := fmt.Sprintf(`{"num_requests":%d,"num_errors":%d,"errors":{"internal":%d,"invalid_request":%d},"processing_time":%d,"average_processing_time":1000}`,
		n, n/2, n/4, n/4, n*1000)
	if string(b) != want {
		t.Fatalf("json %s\nwant %s", b, want)
	}
}

// microStatsData is the part of an endpoint's micro STATS this package adds.
type microStatsData struct {
	Name    string           `json:"name"`
	Subject string           `json:"subject"`
	Data    endpointSnapshot `json:"data"`
}

func requestJSON(t *testing.T, nc *nats.Conn, subject string, out any) {
	t.Helper()
	msg, err := nc.Request(subject, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	if err := json.Unmarshal(msg.Data, out); err != nil {
		t.Fatalf("%s: %s: %v", subject, msg.Data, err)
	}
}

// grantStats reads lease.grant's counts from micro's STATS.
func grantStats(t *testing.T, nc *nats.Conn) endpointSnapshot {
	t.Helper()
	var st struct {
		Endpoints []microStatsData `json:"endpoints"`
	}
	requestJSON(t, nc, "$SRV.STATS.concord", &st)
	for _, e := range st.Endpoints {
		if e.Subject == "concord.lease.grant" {
			return e.Data
		}
	}
	t.Fatalf("no lease.grant in stats %+v", st)
	return endpointSnapshot{}
}

// waitGrantStats waits for the counts: a worker records a request just
// after sending its reply.
func waitGrantStats(t *testing.T, nc *nats.Conn, requests, invalid uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := grantStats(t, nc)
		if got.Requests == requests && got.Errors[schema.ErrInvalidRequest] == invalid && got.NumErrors == invalid && got.ProcessingTime > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease.grant stats %+v, want %d requests, %d invalid_request", got, requests, invalid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMicroServiceName checks that any valid subject prefix, odd ones
// included, gives a name micro accepts, and that micro itself registers it.
func TestMicroServiceName(t *testing.T) {
	cases := map[string]string{
		"concord":                 "concord",
		"acme.concord":            "acme_concord",
		"Acme-1_x.concord":        "Acme-1_x_concord",
		"a.$b.{c}.#d.~e!f\"g'h|i": "a__b__c___d__e_f_g_h_i",
	}
	nc := testnats.Connect(t)
	for prefix, want := range cases {
		if _, err := subjects.New(prefix); err != nil {
			t.Fatalf("%q is not a valid prefix: %v", prefix, err)
		}
		got := microServiceName(prefix)
		if got != want || !microName.MatchString(got) {
			t.Errorf("microServiceName(%q) = %q, want %q (matching %s)", prefix, got, want, microName)
		}
		svc, err := micro.AddService(nc, micro.Config{Name: got, Version: defaultMicroVersion})
		if err != nil {
			t.Errorf("micro refuses the name %q of prefix %q: %v", got, prefix, err)
			continue
		}
		if err := svc.Stop(); err != nil {
			t.Error(err)
		}
	}
}

// TestMicroServiceOnLeader checks the registration through micro's own
// control subjects, and that the counts survive a new leadership term.
func TestMicroServiceOnLeader(t *testing.T) {
	s, nc, _ := startServer(t, func(o *Options) { o.Version = "v1.4.0"; o.NodeID = "n7" })
	var info micro.Info
	requestJSON(t, nc, "$SRV.INFO.concord", &info)
	if info.Name != "concord" || info.Version != "1.4.0" || info.Metadata[microMetaNodeID] != "n7" || info.Metadata[microMetaSubjectPrefix] != "concord" {
		t.Fatalf("info %+v", info)
	}
	if len(info.Endpoints) != len(subjects.Endpoints) {
		t.Fatalf("%d endpoints, want %d", len(info.Endpoints), len(subjects.Endpoints))
	}
	for i, ep := range subjects.Endpoints {
		e := info.Endpoints[i]
		if e.Name != ep.Name() || e.Subject != "concord."+string(ep) || e.QueueGroup != queueGroup ||
			e.Metadata[microMetaRequestSchema] != schema.SchemaBaseURL+string(ep)+".request.json" ||
			e.Metadata[microMetaReplySchema] != schema.SchemaBaseURL+string(ep)+".reply.json" {
			t.Errorf("endpoint %d: %+v", i, e)
		}
	}

	base := grantStats(t, nc)
	for i := 0; i < 3; i++ {
		if e := testnats.Request(t, nc, "concord.lease.grant", map[string]any{"ttl": 30}, nil); e != nil {
			t.Fatal(e)
		}
	}
	if e := testnats.Request(t, nc, "concord.lease.grant", map[string]any{"ttl": 0}, nil); e == nil || e.Name != schema.ErrInvalidRequest {
		t.Fatalf("bad grant: %v", e)
	}
	waitGrantStats(t, nc, base.Requests+4, base.Errors[schema.ErrInvalidRequest]+1)

	// A new term registers a new instance; the counts carry over.
	s.Unsubscribe()
	// The unsubscribe reaches the server on the node's connection, so it
	// may still answer a moment on ours.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := nc.Request("$SRV.INFO.concord", nil, 200*time.Millisecond)
		if errors.Is(err, nats.ErrNoResponders) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after unsubscribe: %v, want no responders", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Subscribe(); err != nil {
		t.Fatal(err)
	}
	var again micro.Info
	requestJSON(t, nc, "$SRV.INFO.concord", &again)
	if again.ID == info.ID {
		t.Fatalf("same instance id %s after a new term", again.ID)
	}
	waitGrantStats(t, nc, base.Requests+4, base.Errors[schema.ErrInvalidRequest]+1)
}
