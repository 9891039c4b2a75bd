package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

func runStatus(args []string) error {
	fs, cf := newFlags("status", "status [--tenant NAME]\n\n"+
		"Shows the cluster's members, leader, term and revision; with --tenant, what tenant NAME (a NATS\n"+
		"account; \"-\" for Concord's own) holds and the quota it is held to (operators).")
	tenant := fs.String("tenant", "", "show what this tenant holds instead")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	if *tenant != "" {
		name := *tenant
		if name == "-" {
			name = ""
		}
		r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.ClusterTenantsReply, error) {
			return c.Tenants(ctx, name)
		})
		if err != nil {
			return err
		}
		if name != "" && len(r.Tenants) == 0 {
			return exitStatus{code: exitNotFound, err: fmt.Errorf("tenant %s has written nothing to this cluster", name)}
		}
		if name == "" {
			r.Tenants = r.Tenants[:1] // the default tenant is listed first
		}
		return cf.output(r, func(w io.Writer) { printTenants(w, r) })
	}
	var nodes []schema.NodeInfo
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.ClusterStatusReply, error) {
		r, err := c.Status(ctx, schema.ClusterStatusRequest{})
		if errors.Is(err, client.ErrUnavailable) {
			// No leader serves: the nodes still answer for themselves, and
			// say what they are doing (restoring a snapshot, replaying the
			// log, waiting for a leader).
			nodes = askNodes(c.NATS(), cf.subjectPfx, nodesWait)
		}
		return r, err
	})
	if err != nil {
		if len(nodes) > 0 && !cf.json {
			printNodes(os.Stdout, nodes)
		}
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "cluster %s: leader %s, term %d, revision %d, history from revision %d\n\n", r.ClusterID, r.Leader, r.Term, r.Revision, r.CompactRevision)
		if r.Conflict != "" {
			fmt.Fprintf(w, "CONFLICT: %s\n\n", r.Conflict)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tADDRESS\tSUFFRAGE\tREACHABLE\tSTATE\tLAST\tCOMMIT\tAPPLIED\tREVISION")
		var busy []string
		for _, m := range r.Members {
			id := m.ID
			if id == r.Leader {
				id += "*"
			}
			if n := m.Node; n != nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", id, m.Address, m.Suffrage, yesNo(m.Reachable), n.State, n.LastIndex, n.CommitIndex, n.AppliedIndex, n.Revision)
				if n.Activity != "" {
					busy = append(busy, fmt.Sprintf("%s: %s", m.ID, n.Activity))
				}
			} else {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\n", id, m.Address, m.Suffrage, yesNo(m.Reachable))
			}
		}
		tw.Flush()
		// What keeps a member from serving, in the words of its /readyz.
		if len(busy) > 0 {
			fmt.Fprintln(w)
			for _, b := range busy {
				fmt.Fprintln(w, b)
			}
		}
	})
}

// nodesWait bounds the question to the nodes when no leader answered.
const nodesWait = time.Second

// nodesGather is how long the question keeps collecting answers after the
// last one: every node answers.
const nodesGather = 300 * time.Millisecond

// askNodes asks every node on the bus for its own report (P.cluster.nodes)
// and returns the answers, sorted by node id: within wait, and until
// nodesGather passes without a new one.
func askNodes(nc *nats.Conn, prefix string, wait time.Duration) []schema.NodeInfo {
	names, err := subjects.New(prefix)
	if err != nil {
		return nil
	}
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(names.Nodes(), inbox, []byte(`{}`)); err != nil {
		return nil
	}
	var out []schema.NodeInfo
	deadline := time.Now().Add(wait)
	for {
		left := time.Until(deadline)
		if len(out) > 0 {
			left = min(left, nodesGather)
		}
		if left <= 0 {
			break
		}
		msg, err := sub.NextMsg(left)
		if err != nil {
			break // the time is up, or no responders
		}
		if msg.Header.Get(schema.HeaderErrorCode) != "" || len(msg.Data) == 0 {
			continue
		}
		var info schema.NodeInfo
		if json.Unmarshal(msg.Data, &info) == nil && info.ID != "" {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b schema.NodeInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// printNodes shows what each node said when no leader served.
func printNodes(w io.Writer, nodes []schema.NodeInfo) {
	fmt.Fprintln(w, "no leader serves requests; the nodes on the bus say:")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTERM\tLEADER\tLAST\tCOMMIT\tAPPLIED\tACTIVITY")
	for _, n := range nodes {
		leader, act := n.Leader, n.Activity
		if leader == "" {
			leader = "-"
		}
		if act == "" {
			act = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%s\n", n.ID, n.State, n.Term, leader, n.LastIndex, n.CommitIndex, n.AppliedIndex, act)
	}
	tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
