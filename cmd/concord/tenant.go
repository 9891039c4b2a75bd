package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// The operator's tenant commands (docs/tenancy.md): what each tenant holds,
// and the quota it is held to. Both need Concord's own account.

func runTenant(args []string) error {
	return subcommand("tenant", args, map[string]func([]string) error{
		"list":  tenantList,
		"quota": tenantQuota,
		"move":  tenantMove,
	}, "list|quota|move")
}

func tenantList(args []string) error {
	fs, cf := newFlags("tenant list", "tenant list [TENANT]\n\n"+
		"Lists what every tenant holds and the quota it is held to, or TENANT's alone (operators: Concord's\n"+
		"own account). The tenant \"\" (shown as -) is Concord's own account, which has no quota. A 0 in a\n"+
		"quota is no bound.")
	pos, err := parseArgs(fs, args, 0, 1)
	if err != nil {
		return err
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.ClusterTenantsReply, error) {
		return c.Tenants(ctx, name)
	})
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) { printTenants(w, r) })
}

// printTenants prints the tenants' usage, one line each, and the default
// quota.
func printTenants(w io.Writer, r *schema.ClusterTenantsReply) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tKEYS\tLEASES\tANONYMOUS\tVALUE BYTES\tHISTORY\tFLOOR\tQUOTA: LEASES\tKEYS\tVALUE BYTES\tKEEPALIVE_MANY\tREQ/S")
	for _, t := range r.Tenants {
		name := t.Tenant
		if name == "" {
			name = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t", name, t.Keys, t.Leases, t.AnonymousLeases, t.ValueBytes, t.HistoryChanges, t.CompactRevision)
		if q := t.Quota; q != nil {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\n", q.Leases, q.Keys, q.ValueBytes, q.KeepAliveMany, q.RequestsPerSecond)
		} else {
			fmt.Fprintln(tw, "-\t-\t-\t-\t-")
		}
	}
	tw.Flush()
	if q := r.DefaultQuota; q != nil {
		fmt.Fprintf(w, "\ndefault quota: %d leases, %d keys, %d value bytes, keepalive_many of %d, %d requests/s\n",
			q.Leases, q.Keys, q.ValueBytes, q.KeepAliveMany, q.RequestsPerSecond)
	}
}

func tenantQuota(args []string) error {
	fs, cf := newFlags("tenant quota", "tenant quota TENANT [--leases N] [--keys N] [--value-bytes N] [--keepalive-many N] [--rate N] | TENANT --clear\n\n"+
		"Sets the quota TENANT (a NATS account) is held to; TENANT \"*\" sets the quota of every tenant without\n"+
		"its own. A quota left out, or 0, is no bound. --clear removes TENANT's own quota: it is then held to\n"+
		"the default one. Quotas are replicated: every node refuses the same requests. Operators only.")
	var q schema.ClusterQuotaRequest
	fs.Int64Var(&q.Leases, "leases", 0, "most leases, anonymous ones included")
	fs.Int64Var(&q.Keys, "keys", 0, "most keys")
	fs.Int64Var(&q.ValueBytes, "value-bytes", 0, "most bytes of values and their metadata")
	fs.Int64Var(&q.KeepAliveMany, "keepalive-many", 0, "most leases one keepalive_many may list")
	fs.Int64Var(&q.RequestsPerSecond, "rate", 0, "most requests per second the leader takes, with bursts of as many")
	fs.BoolVar(&q.Clear, "clear", false, "remove the tenant's own quota")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	q.Tenant = pos[0]
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.ClusterQuotaReply, error) {
		return c.SetQuota(ctx, q)
	})
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "tenant %s is held to %d leases, %d keys, %d value bytes, keepalive_many of %d, %d requests/s (0: no bound)\n",
			r.Tenant, r.Quota.Leases, r.Quota.Keys, r.Quota.ValueBytes, r.Quota.KeepAliveMany, r.Quota.RequestsPerSecond)
	})
}

func tenantMove(args []string) error {
	fs, cf := newFlags("tenant move", "tenant move TENANT --to-prefix P\n\n"+
		"Moves TENANT (a NATS account) from the cluster at --subject-prefix to the cluster at prefix P on the\n"+
		"same NATS bus: fences it (its requests get 503, retry, and its leases are frozen), copies its keys,\n"+
		"leases with their time left and idempotency entries, serves it on P and drops it here. Then point\n"+
		"the account's imports at P (docs/tenancy.md); until then its requests get 503 naming P. On an error\n"+
		"the move is undone. Operators only. --timeout bounds the whole move (default here 5m).")
	to := fs.String("to-prefix", "", "subject prefix of the target cluster")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *to == "" || *to == cf.subjectPfx {
		return usagef("--to-prefix must name another cluster's subject prefix than --subject-prefix %q", cf.subjectPfx)
	}
	if !isSet(fs, "timeout") {
		cf.timeout = 5 * time.Minute
	}
	rep, err := callOnce(cf, func(ctx context.Context, src *client.Client) (client.MoveReport, error) {
		dst, err := client.Connect(client.Conn(src.NATS()), client.Prefix(*to))
		if err != nil {
			return client.MoveReport{}, err
		}
		defer dst.Close()
		return client.MoveTenant(ctx, src, dst, pos[0])
	})
	if err != nil {
		return err
	}
	out := map[string]any{"tenant": pos[0], "to": *to, "leases": rep.Leases, "keys": rep.Keys, "idempotency": rep.Idempotency,
		"fenced_ms": rep.Fenced.Milliseconds()}
	return cf.output(out, func(w io.Writer) {
		fmt.Fprintf(w, "moved %s to %s: %d leases, %d keys, %d idempotency entries; refused for %s from the fence to the target serving it\n",
			pos[0], *to, rep.Leases, rep.Keys, rep.Idempotency, rep.Fenced.Round(time.Millisecond))
		fmt.Fprintf(w, "now point %s's imports at %s.lease.*, %s.kv.* and %s.tenant.%s.watch.>\n", pos[0], *to, *to, *to, pos[0])
	})
}
