package serving

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
)

// A pooled listing reply gives its slice back with no record in it, so
// the pool keeps no value alive, and an oversized slice is not kept.
func TestPooledGetReplyRelease(t *testing.T) {
	buf := new([]schema.KeyValue)
	r := &pooledGetReply{KVGetReply: &schema.KVGetReply{KVs: []schema.KeyValue{{Key: "a", Value: json.RawMessage(`1`)}, {Key: "b"}}}, buf: buf}
	kvs := r.KVs
	r.release()
	if len(*buf) != 0 || cap(*buf) != cap(kvs) {
		t.Fatalf("pooled slice len %d cap %d, want 0 and %d", len(*buf), cap(*buf), cap(kvs))
	}
	for i, kv := range kvs[:cap(kvs)] {
		if kv.Key != "" || kv.Value != nil {
			t.Fatalf("record %d still held after release: %+v", i, kv)
		}
	}
	big := new([]schema.KeyValue)
	r = &pooledGetReply{KVGetReply: &schema.KVGetReply{KVs: make([]schema.KeyValue, 1, maxPooledKVs+1)}, buf: big}
	r.release()
	if *big != nil {
		t.Fatalf("an oversized slice (cap %d) was kept", cap(*big))
	}
	var _ jsonAppender = r // the embedded reply encodes itself
}

// A pooled listing reply, which yields (and, with writes in flight,
// pauses) while it writes itself, writes the bytes of the reply it holds.
func TestPooledGetReplyWritesItsReply(t *testing.T) {
	reply := &schema.KVGetReply{Revision: 5, Count: 600, More: true}
	for i := range 600 {
		reply.KVs = append(reply.KVs, schema.KeyValue{Key: strconv.Itoa(i), Value: json.RawMessage(`{"n":1}`), Version: 1})
	}
	writing := true
	pace, run, slept, _ := fakePacer(0.5, &writing)
	// Each reading of the clock finds a millisecond more gone.
	now := pace.now
	pace.now = func() time.Time { run(time.Millisecond); return now() }
	p := &pooledGetReply{KVGetReply: reply, buf: new([]schema.KeyValue), pace: pace}
	var a jsonAppender = p
	if got, want := a.AppendJSON(nil), reply.AppendJSON(nil); !bytes.Equal(got, want) {
		t.Fatalf("pooled reply wrote\n%s\nnot\n%s", got, want)
	}
	// 600 records: yields after the 256th and the 512th, the first of
	// them after a millisecond's work, which it pauses for.
	if len(*slept) == 0 {
		t.Fatal("a reply written beside writes never paused")
	}
}
