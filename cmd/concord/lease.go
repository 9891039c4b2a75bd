package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

func runLease(args []string) error {
	return subcommand("lease", args, map[string]func([]string) error{
		"grant":     leaseGrant,
		"keepalive": leaseKeepAlive,
		"revoke":    leaseRevoke,
		"info":      leaseInfo,
		"list":      leaseList,
	}, "grant|keepalive|revoke|info|list")
}

func leaseGrant(args []string) error {
	fs, cf := newFlags("lease grant", "lease grant TTL [--id N] [--metadata JSON]")
	id := fs.Int64("id", 0, "ask for this lease id (0: the server chooses)")
	metadata := fs.String("metadata", "", "a JSON object kept with the lease")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	ttl, err := parseSeconds(pos[0])
	if err != nil {
		return usagef("TTL: %v", err)
	}
	req := schema.LeaseGrantRequest{TTL: ttl, ID: *id}
	if *metadata != "" {
		if !json.Valid([]byte(*metadata)) {
			return usagef("--metadata: not valid JSON: %s", *metadata)
		}
		req.Metadata = json.RawMessage(*metadata)
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.LeaseGrantReply, error) { return c.Grant(ctx, req) })
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "lease %d granted, ttl %ds\n", r.ID, r.TTL)
	})
}

func leaseKeepAlive(args []string) error {
	fs, cf := newFlags("lease keepalive", "lease keepalive ID [--ttl N]")
	var ttl seconds
	fs.Var(&ttl, "ttl", "change the lease's ttl from this renewal on")
	id, err := parseIDArg(fs, args)
	if err != nil {
		return err
	}
	req := schema.LeaseKeepAliveRequest{ID: id}
	if ttl.set {
		req.TTL = client.Ptr(ttl.n)
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.LeaseKeepAliveReply, error) {
		return c.KeepAlive(ctx, req)
	})
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "lease %d renewed, ttl %ds, %s left\n", r.ID, r.TTL, msText(r.RemainingMS))
	})
}

func leaseRevoke(args []string) error {
	fs, cf := newFlags("lease revoke", "lease revoke ID")
	id, err := parseIDArg(fs, args)
	if err != nil {
		return err
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.LeaseRevokeReply, error) {
		return c.Revoke(ctx, schema.LeaseRevokeRequest{ID: id})
	})
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "lease %d revoked, %s deleted at revision %d\n", id, count(r.Deleted, "key"), r.Revision)
	})
}

func leaseInfo(args []string) error {
	fs, cf := newFlags("lease info", "lease info ID [--keys]")
	keys := fs.Bool("keys", false, "list the attached keys")
	id, err := parseIDArg(fs, args)
	if err != nil {
		return err
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.LeaseInfo, error) {
		return c.LeaseInfo(ctx, schema.LeaseInfoRequest{ID: id, Keys: *keys})
	})
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
		fmt.Fprintf(tw, "lease:\t%d\n", r.ID)
		fmt.Fprintf(tw, "ttl:\t%ds\n", r.TTL)
		fmt.Fprintf(tw, "remaining:\t%s\n", msText(r.RemainingMS))
		fmt.Fprintf(tw, "granted at revision:\t%d\n", r.GrantedRevision)
		fmt.Fprintf(tw, "anonymous:\t%t\n", r.Anonymous)
		fmt.Fprintf(tw, "metadata:\t%s\n", metadataText(r.Metadata))
		fmt.Fprintf(tw, "keys:\t%d\n", r.KeyCount)
		tw.Flush()
		for _, k := range r.Keys {
			fmt.Fprintf(w, "  %s\n", k)
		}
	})
}

func metadataText(m json.RawMessage) string {
	if len(m) == 0 || string(m) == "null" {
		return "{}"
	}
	return string(m)
}

func leaseList(args []string) error {
	fs, cf := newFlags("lease list", "lease list [--all] [--limit N] [--after ID]")
	all := fs.Bool("all", false, "include the anonymous leases of keys put with a ttl")
	limit := fs.Int("limit", 0, "most leases to list (0: the server's default)")
	after := fs.Int64("after", 0, "continue after this lease id")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.LeaseListReply, error) {
		return c.LeaseList(ctx, schema.LeaseListRequest{IncludeAnonymous: *all, Limit: *limit, After: *after})
	})
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		if len(r.Leases) == 0 {
			fmt.Fprintln(w, "no leases")
			return
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTTL\tREMAINING\tKEYS\tANONYMOUS\tMETADATA")
		for _, l := range r.Leases {
			fmt.Fprintf(tw, "%d\t%ds\t%s\t%d\t%t\t%s\n", l.ID, l.TTL, msText(l.RemainingMS), l.KeyCount, l.Anonymous, metadataText(l.Metadata))
		}
		tw.Flush()
		if r.More {
			fmt.Fprintf(w, "more: continue with --after %d\n", r.Leases[len(r.Leases)-1].ID)
		}
	})
}

// parseIDArg parses the flags and the one positional argument, a lease ID.
func parseIDArg(fs *flag.FlagSet, args []string) (int64, error) {
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return 0, err
	}
	return parseID("ID", pos[0])
}
