// Command lockworker contends for a Concord lock from several goroutines,
// for the black-box tests. Every holder checks, through the store itself,
// that it holds alone and that fencing tokens only grow:
//
//   - on taking the lock it creates "<name>-holder" with create_revision == 0:
//     if the key exists, another holder is inside (two holders at once);
//   - it writes its fencing token to "<name>-fence" only if the stored token
//     is smaller: a smaller token arriving later is a stale holder.
//
// It prints one JSON line of results and exits 0, or 1 with the violation.
// With -hold it takes the lock once, prints "holding", and waits to be
// killed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

func main() {
	url := flag.String("url", "nats://127.0.0.1:4222", "NATS URLs")
	name := flag.String("name", "locks.test", "lock name")
	workers := flag.Int("workers", 4, "goroutines contending")
	duration := flag.Duration("duration", 10*time.Second, "how long to contend")
	ttl := flag.Duration("ttl", 3*time.Second, "session ttl")
	hold := flag.Bool("hold", false, "take the lock once and hold it until killed")
	flag.Parse()
	c, err := client.Connect(client.URL(*url))
	if err != nil {
		fail(err)
	}
	defer c.Close()
	if *hold {
		holdForever(c, *name, *ttl)
	}
	var acquired []int64
	var violations atomic.Value
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := time.Now().Add(*duration)
	acquired = make([]int64, *workers)
	for i := 0; i < *workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			s, err := c.NewSession(ctx, *ttl)
			if err != nil {
				violations.Store(fmt.Sprintf("session: %v", err))
				return
			}
			defer s.Close(ctx)
			m := client.NewMutex(s, *name)
			for time.Now().Before(stop) {
				lctx, cancel := context.WithTimeout(ctx, *duration+30*time.Second)
				err := m.Lock(lctx)
				cancel()
				if err != nil {
					violations.Store(fmt.Sprintf("lock: %v", err))
					return
				}
				if msg := inside(ctx, c, *name, m.FencingToken(), s.Lease()); msg != "" {
					violations.Store(msg)
					return
				}
				mu.Lock()
				acquired[i]++
				mu.Unlock()
				if err := m.Unlock(ctx); err != nil {
					violations.Store(fmt.Sprintf("unlock: %v", err))
					return
				}
			}
		}(i)
	}
	wg.Wait()
	out := map[string]any{"acquired": acquired}
	if v, _ := violations.Load().(string); v != "" {
		out["violation"] = v
	}
	json.NewEncoder(os.Stdout).Encode(out)
	if _, bad := out["violation"]; bad {
		os.Exit(1)
	}
}

// inside runs the two checks a holder makes, then leaves.
func inside(ctx context.Context, c *client.Client, name string, token, lease int64) string {
	holder, fence := name+"-holder", name+"-fence"
	r, err := c.Txn(ctx, schema.KVTxnRequest{
		Compare: []schema.TxnCompare{{Key: holder, Target: schema.TargetCreateRevision, Op: "==", Value: json.RawMessage("0")}},
		Success: []schema.TxnOp{{Put: &schema.TxnPut{Key: holder, Value: json.RawMessage(strconv.FormatInt(lease, 10))}}},
		Failure: []schema.TxnOp{{Get: &schema.TxnGet{Key: &holder}}},
	})
	if err != nil {
		return fmt.Sprintf("holder check: %v", err)
	}
	if !r.Succeeded {
		return fmt.Sprintf("two holders at once: lease %d found %s inside", lease, r.Responses[0].Get.KVs[0].Value)
	}
	// The fence only moves forward: write the token if it is larger than
	// the stored one, atomically (or create the fence if there is none).
	tok := json.RawMessage(strconv.FormatInt(token, 10))
	f, err := c.Txn(ctx, schema.KVTxnRequest{
		Compare: []schema.TxnCompare{{Key: fence, Target: schema.TargetField, Path: client.Ptr(""), Op: "<", Value: tok}},
		Success: []schema.TxnOp{{Put: &schema.TxnPut{Key: fence, Value: tok}}},
		Failure: []schema.TxnOp{{Get: &schema.TxnGet{Key: &fence}}},
	})
	if err != nil {
		return fmt.Sprintf("fence: %v", err)
	}
	if !f.Succeeded {
		if kvs := f.Responses[0].Get.KVs; len(kvs) == 1 {
			return fmt.Sprintf("fencing token %d after %s", token, kvs[0].Value)
		}
		created, err := c.Txn(ctx, schema.KVTxnRequest{
			Compare: []schema.TxnCompare{{Key: fence, Target: schema.TargetExists, Op: "==", Value: json.RawMessage("false")}},
			Success: []schema.TxnOp{{Put: &schema.TxnPut{Key: fence, Value: tok}}},
		})
		if err != nil {
			return fmt.Sprintf("fence: %v", err)
		}
		if !created.Succeeded {
			return "two holders created the fence at once"
		}
	}
	if _, err := c.Delete(ctx, schema.KVDeleteRequest{Key: &holder}); err != nil {
		return fmt.Sprintf("leave: %v", err)
	}
	return ""
}

func holdForever(c *client.Client, name string, ttl time.Duration) {
	ctx := context.Background()
	s, err := c.NewSession(ctx, ttl)
	if err != nil {
		fail(err)
	}
	m := client.NewMutex(s, name)
	if err := m.Lock(ctx); err != nil {
		fail(err)
	}
	fmt.Printf("holding %d\n", m.FencingToken())
	select {}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "lockworker:", err)
	os.Exit(1)
}
