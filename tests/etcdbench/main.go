// Command etcdbench runs Concord's grant, put-with-lease and keepalive
// workloads against etcd, the same way `concord bench` runs them against
// Concord: N closed-loop clients, each with its own connection, for a fixed
// duration. It lives in its own module so etcd's client does not enter
// Concord's dependencies.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	endpoint := flag.String("endpoint", "127.0.0.1:2379", "etcd client endpoint")
	clients := flag.Int("clients", 32, "concurrent clients, each with its own connection")
	duration := flag.Duration("duration", 10*time.Second, "how long each workload runs")
	valueBytes := flag.Int("value-bytes", 64, "size of each value")
	flag.Parse()
	workloads := flag.Args()
	if len(workloads) == 0 {
		workloads = []string{"grant", "put", "keepalive", "get"}
	}
	var cs []*clientv3.Client
	for i := 0; i < *clients; i++ {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 5 * time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer c.Close()
		cs = append(cs, c)
	}
	value := `"` + strings.Repeat("v", max(*valueBytes-2, 0)) + `"`
	run := fmt.Sprintf("r%d", time.Now().UnixNano()%1e9)
	fmt.Printf("%-10s %10s %10s %9s %9s %9s %7s\n", "workload", "ops", "ops/s", "p50 ms", "p99 ms", "p999 ms", "errors")
	for _, w := range workloads {
		if err := runWorkload(w, cs, *duration, value, run); err != nil {
			fmt.Fprintln(os.Stderr, w, err)
			os.Exit(1)
		}
	}
}

func runWorkload(w string, cs []*clientv3.Client, d time.Duration, value, run string) error {
	ctx := context.Background()
	leases := make([]clientv3.LeaseID, len(cs))
	streams := make([]pb.Lease_LeaseKeepAliveClient, len(cs))
	for i, c := range cs {
		if w == "put" || w == "keepalive" || w == "get" {
			g, err := c.Grant(ctx, 600)
			if err != nil {
				return err
			}
			leases[i] = g.ID
		}
		if w == "keepalive" {
			// A keep-alive stream is how etcd clients renew: the cheapest path etcd offers.
			s, err := pb.NewLeaseClient(c.ActiveConnection()).LeaseKeepAlive(ctx)
			if err != nil {
				return err
			}
			streams[i] = s
		}
		if w == "get" {
			for k := 0; k < 100; k++ {
				if _, err := c.Put(ctx, fmt.Sprintf("bench/%s/get/%d/%d", run, i, k), value, clientv3.WithLease(leases[i])); err != nil {
					return err
				}
			}
		}
	}
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	lats := make([][]time.Duration, len(cs))
	errs := make([]int, len(cs))
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range cs {
		wg.Add(1)
		go func(i int, c *clientv3.Client) {
			defer wg.Done()
			for n := 0; tctx.Err() == nil; n++ {
				t0 := time.Now()
				var err error
				switch w {
				case "grant":
					_, err = c.Grant(ctx, 600)
				case "put":
					_, err = c.Put(ctx, fmt.Sprintf("bench/%s/put/%d/%d", run, i, n%1000), value, clientv3.WithLease(leases[i]))
				case "keepalive":
					if err = streams[i].Send(&pb.LeaseKeepAliveRequest{ID: int64(leases[i])}); err == nil {
						_, err = streams[i].Recv()
					}
				case "get":
					_, err = c.Get(ctx, fmt.Sprintf("bench/%s/get/%d/%d", run, i, n%100))
				default:
					err = fmt.Errorf("unknown workload %q", w)
				}
				if err != nil {
					errs[i]++
					if errs[i] > 1000 {
						return
					}
					continue
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}(i, c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	total := 0
	for i := range lats {
		all = append(all, lats[i]...)
		total += errs[i]
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	p := func(q float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[int(float64(len(all)-1)*q)]) / 1e6
	}
	fmt.Printf("%-10s %10d %10.0f %9.2f %9.2f %9.2f %7d\n", w, len(all), float64(len(all))/elapsed.Seconds(), p(0.5), p(0.99), p(0.999), total)
	return nil
}
