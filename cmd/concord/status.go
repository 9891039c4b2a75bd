package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

func runStatus(args []string) error {
	fs, cf := newFlags("status", "status")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.ClusterStatusReply, error) {
		return c.Status(ctx, schema.ClusterStatusRequest{})
	})
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "cluster %s: leader %s, term %d, revision %d, history from revision %d\n\n", r.ClusterID, r.Leader, r.Term, r.Revision, r.CompactRevision)
		if r.Conflict != "" {
			fmt.Fprintf(w, "CONFLICT: %s\n\n", r.Conflict)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tADDRESS\tSUFFRAGE\tREACHABLE\tSTATE\tLAST\tCOMMIT\tAPPLIED\tREVISION")
		for _, m := range r.Members {
			id := m.ID
			if id == r.Leader {
				id += "*"
			}
			if n := m.Node; n != nil {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", id, m.Address, m.Suffrage, yesNo(m.Reachable), n.State, n.LastIndex, n.CommitIndex, n.AppliedIndex, n.Revision)
			} else {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\n", id, m.Address, m.Suffrage, yesNo(m.Reachable))
			}
		}
		tw.Flush()
	})
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
