package tests

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// floodBodies are requests the service must refuse: malformed, mistyped,
// unknown fields, bad keys, oversized values and metadata, binary junk.
func floodBodies() []struct {
	ep   subjects.Endpoint
	body []byte
} {
	big := `"` + strings.Repeat("v", 1<<20+10) + `"`
	junk := make([]byte, 4096)
	rand.New(rand.NewSource(1)).Read(junk)
	type b = struct {
		ep   subjects.Endpoint
		body []byte
	}
	return []b{
		{subjects.KVPut, []byte(`{"key":`)},
		{subjects.KVPut, []byte(`{"key":"flood.a","value":` + big + `}`)},
		{subjects.KVPut, []byte(`{"key":"a b","value":1}`)},
		{subjects.KVPut, []byte(`{"key":"a.>","value":1}`)},
		{subjects.KVPut, []byte(`{"key":"flood.b","value":1,"lease":1,"ttl":5}`)},
		{subjects.KVPut, junk},
		{subjects.LeaseGrant, []byte(`{"ttl":"5"}`)},
		{subjects.LeaseGrant, []byte(`{"ttl":0}`)},
		{subjects.LeaseGrant, []byte(`{"ttl":5,"metadata":{"x":"` + strings.Repeat("m", 9000) + `"}}`)},
		{subjects.LeaseGrant, []byte(`{"ttl":5,"tll":5}`)},
		{subjects.LeaseKeepAlive, []byte(`{"id":-1}`)},
		{subjects.LeaseKeepAlive, []byte(`[1,2,3]`)},
		{subjects.LeaseRevoke, []byte(`{"id":true}`)},
		{subjects.KVGet, []byte(`{"key":"a","prefix":"b"}`)},
		{subjects.KVGet, []byte(`{"prefix":"","limit":100000}`)},
		{subjects.KVDelete, []byte(`{}`)},
		{subjects.KVTxn, []byte(`{"compare":[{"key":"a","target":"nope"}]}`)},
		{subjects.KVTxn, []byte(`{"success":[` + strings.Repeat(`{"get":{"key":"a"}},`, 500) + `{"get":{"key":"a"}}]}`)},
		{subjects.LeaseKeepAliveMany, []byte(`{"ids":"all"}`)},
		{subjects.KVChanges, []byte(`{"from_revision":-4}`)},
	}
}

// While several connections flood every endpoint with bad and oversized
// requests, a well-behaved client keeps a lease with keys alive: none of
// its keys is lost, every keep-alive is answered well within the ttl, and
// the flood changes nothing.
func TestFloodOfBadRequestsDoesNotStarveAGoodClient(t *testing.T) {
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	const ttl = 3
	lease := c.grant(ttl)
	for i := 0; i < 20; i++ {
		c.put(fmt.Sprintf("good.k%02d", i), i, lease)
	}
	revBefore := c.revision()

	bodies := floodBodies()
	stop := make(chan struct{})
	var sent, refused, otherReplies atomic.Int64
	var wg sync.WaitGroup
	for f := 0; f < 4; f++ {
		nc, err := nats.Connect(n.natsURL)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		// Each flooder keeps 32 requests in flight, without pause.
		for g := 0; g < 32; g++ {
			wg.Add(1)
			go func(seed int64) {
				defer wg.Done()
				r := rand.New(rand.NewSource(seed))
				for {
					select {
					case <-stop:
						return
					default:
					}
					b := bodies[r.Intn(len(bodies))]
					sent.Add(1)
					msg, err := nc.Request("concord."+string(b.ep), b.body, 5*time.Second)
					switch {
					case err != nil:
						// A flooder's own request may time out; that is the
						// flooder's problem, not the good client's.
					case msg.Header.Get(schema.HeaderErrorCode) != "":
						refused.Add(1)
					default:
						otherReplies.Add(1)
					}
				}
			}(int64(f*100 + g))
		}
	}

	// The good client: a keep-alive every 500 ms for 8 s, on its own
	// connection, each timed from send to reply.
	good, err := nats.Connect(n.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	var lat []time.Duration
	var failures []string
	req, _ := json.Marshal(schema.LeaseKeepAliveRequest{ID: lease})
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		start := time.Now()
		msg, err := good.Request("concord.lease.keepalive", req, ttl*time.Second)
		took := time.Since(start)
		switch {
		case err != nil:
			failures = append(failures, err.Error())
		case msg.Header.Get(schema.HeaderErrorCode) != "":
			failures = append(failures, string(msg.Data))
		default:
			lat = append(lat, took)
		}
		time.Sleep(500*time.Millisecond - min(took, 500*time.Millisecond))
	}
	close(stop)
	wg.Wait()

	if len(failures) > 0 {
		t.Errorf("%d keep-alives failed during the flood: %v", len(failures), failures)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) < 10 {
		t.Fatalf("only %d keep-alives answered", len(lat))
	}
	// Bounded: every renewal well inside the ttl, so the lease is never
	// at risk. (Generous on purpose: this is a shared 2-core machine.)
	if worst := lat[len(lat)-1]; worst > time.Second {
		t.Errorf("slowest keep-alive took %v; latencies %v", worst, lat)
	}
	t.Logf("flood: %d bad requests sent, %d refused with an error reply, %d other replies; good keep-alives: %d, median %v, max %v",
		sent.Load(), refused.Load(), otherReplies.Load(), len(lat), lat[len(lat)/2], lat[len(lat)-1])
	if refused.Load() < 1000 {
		t.Errorf("the flood was too thin to mean anything: %d refusals", refused.Load())
	}
	if otherReplies.Load() != 0 {
		t.Errorf("%d bad requests got a success reply", otherReplies.Load())
	}

	// Nothing lost, nothing changed.
	g := c.get(map[string]any{"prefix": "good."})
	if g.Count != 20 {
		t.Errorf("the good client has %d of its 20 keys", g.Count)
	}
	if rev := c.revision(); rev != revBefore {
		t.Errorf("the flood moved the revision from %d to %d", revBefore, rev)
	}
	if info := c.info(lease, false); info.KeyCount != 20 {
		t.Errorf("lease holds %d keys", info.KeyCount)
	}
}
