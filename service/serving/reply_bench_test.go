package serving

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/service/decode"
)

// BenchmarkListingPage is the server's work for one page of a large
// listing, first page of a 100,000-key prefix bounded as handleGet bounds
// it: the read on a view, then the reply's encoding. "reflect" is the path
// every reply took before listings had their own: a new record slice and
// encoding/json; "pooled" is handleGet's now: a reused record slice
// (GetQuery.Into) and KVGetReply.AppendJSON into a reused buffer.
func BenchmarkListingPage(b *testing.B) {
	st := fsm.New()
	value := json.RawMessage(`"` + strings.Repeat("v", 98) + `"`)
	for i := 0; i < 100_000; i++ {
		data, err := fsm.Encode(1000, &fsm.Put{Key: fmt.Sprintf("r.%07d", i), Value: value})
		if err != nil {
			b.Fatal(err)
		}
		if r := st.Apply(data); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	q := fsm.GetQuery{Key: "r.", IsPrefix: true, Limit: 10_000, MaxBytes: (1 << 20) - decode.ReplyHeadroom}
	v := st.View()
	var size int
	b.Run("reflect", func(b *testing.B) {
		for b.Loop() {
			data, err := marshal(v.Get(q, v.Now()))
			if err != nil {
				b.Fatal(err)
			}
			size = len(data)
		}
		b.ReportMetric(float64(size), "reply-B")
	})
	b.Run("pooled", func(b *testing.B) {
		var buf []byte
		var kvs []schema.KeyValue
		for b.Loop() {
			q.Into = kvs
			reply := v.Get(q, v.Now())
			buf = reply.AppendJSON(buf[:0])
			kvs = reply.KVs
			clear(kvs)
		}
		b.ReportMetric(float64(len(buf)), "reply-B")
	})
}
