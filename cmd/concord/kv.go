package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

func runKV(args []string) error {
	return subcommand("kv", args, map[string]func([]string) error{
		"put":     kvPut,
		"get":     kvGet,
		"del":     kvDel,
		"txn":     kvTxn,
		"history": kvHistory,
		"compact": kvCompact,
	}, "put|get|del|txn|history|compact")
}

func kvPut(args []string) error {
	fs, cf := newFlags("kv put", "kv put KEY VALUE|- [--file FILE] [--lease ID | --ttl N] [--prev]\n\n"+
		"VALUE \"-\" reads the value from stdin; --file reads it from FILE. Either way the value is the\n"+
		"whole input, a final newline included, taken as JSON if it parses as JSON and as a string otherwise.\n"+
		"To store the string \"-\" itself, give it as JSON: '\"-\"'.")
	lease := fs.Int64("lease", 0, "attach the key to this lease")
	var ttl seconds
	fs.Var(&ttl, "ttl", "attach the key to its own anonymous lease of this ttl")
	prev := fs.Bool("prev", false, "return the previous record")
	file := fs.String("file", "", "read the value from `FILE` (\"-\": stdin) instead of the VALUE argument")
	pos, err := parseArgs(fs, args, 1, 2)
	if err != nil {
		return err
	}
	var text string
	switch {
	case isSet(fs, "file") && len(pos) == 2:
		return usagef("give VALUE or --file, not both")
	case isSet(fs, "file"):
		text, err = readValue(*file)
	case len(pos) == 1:
		return usagef("missing VALUE (\"-\" reads it from stdin, --file FILE from a file)")
	case pos[1] == "-":
		text, err = readValue("-")
	default:
		text = pos[1]
	}
	if err != nil {
		return err
	}
	value, err := jsonValue(text)
	if err != nil {
		return err
	}
	req := schema.KVPutRequest{Key: pos[0], Value: value, PrevKV: *prev}
	if isSet(fs, "lease") && ttl.set {
		return usagef("give --lease or --ttl, not both")
	}
	if isSet(fs, "lease") {
		req.Lease = lease
	}
	if ttl.set {
		req.TTL = client.Ptr(ttl.n)
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.KVPutReply, error) { return c.Put(ctx, req) })
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "revision %d\n", r.Revision)
		if *prev {
			if r.PrevKV == nil {
				fmt.Fprintln(w, "previous: none")
			} else {
				fmt.Fprintf(w, "previous: %s\n", keyValueText(*r.PrevKV))
			}
		}
	})
}

// readValue reads a value from file, or from stdin for "-".
func readValue(file string) (string, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return "", usagef("read the value: %v", err)
	}
	return string(data), nil
}

func kvGet(args []string) error {
	fs, cf := newFlags("kv get", "kv get KEY [--prefix] [--rev N] [--limit N] [--after KEY] [--keys-only] [--count] [--serializable]\n\n"+
		"--rev N reads the keys as they stood right after revision N committed (no remaining lease time is\n"+
		"shown); a revision below the compaction floor exits 7, one not yet written exits 1. Continue a prefix\n"+
		"read with --after at the same --rev to see the same snapshot, page after page.")
	prefix := fs.Bool("prefix", false, "read every key starting with KEY (\"\" for all keys)")
	var rev optionalRevision
	fs.Var(&rev, "rev", "read at revision `N` (0 or absent: the present)")
	limit := fs.Int("limit", 0, "most records to return (0: the server's default)")
	after := fs.String("after", "", "continue a prefix read after this key")
	keysOnly := fs.Bool("keys-only", false, "leave the values out")
	count := fs.Bool("count", false, "print only the number of matching keys")
	serializable := fs.Bool("serializable", false, "read without confirming leadership (may be stale)")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	req := schema.KVGetRequest{Limit: *limit, After: *after, KeysOnly: *keysOnly, CountOnly: *count, Serializable: *serializable, Revision: rev.n}
	if *prefix {
		req.Prefix = &pos[0]
	} else {
		req.Key = &pos[0]
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.KVGetReply, error) { return c.Get(ctx, req) })
	if err != nil {
		return err
	}
	if err := cf.output(r, func(w io.Writer) {
		if *count {
			fmt.Fprintln(w, r.Count)
			return
		}
		for _, kv := range r.KVs {
			fmt.Fprintln(w, keyValueText(kv))
		}
		if r.More && len(r.KVs) > 0 {
			atRev := ""
			if rev.n != 0 {
				atRev = fmt.Sprintf(" --rev %d", r.Revision)
			}
			fmt.Fprintf(os.Stderr, "%d of %d keys shown; continue with --after %s%s\n", len(r.KVs), r.Count, r.KVs[len(r.KVs)-1].Key, atRev)
		}
	}); err != nil {
		return err
	}
	if !*prefix && r.Count == 0 {
		if rev.n != 0 {
			return exitStatus{exitNotFound, fmt.Errorf("key %s at revision %d: %w", pos[0], rev.n, errNotFound)}
		}
		return exitStatus{exitNotFound, fmt.Errorf("key %s: %w", pos[0], errNotFound)}
	}
	return nil
}

// keyValueText is "KEY VALUE" for a record, or KEY alone without a value.
func keyValueText(kv schema.KeyValue) string {
	if len(kv.Value) == 0 {
		return kv.Key
	}
	return kv.Key + " " + string(kv.Value)
}

func kvDel(args []string) error {
	fs, cf := newFlags("kv del", "kv del KEY [--prefix] [--prev]")
	prefix := fs.Bool("prefix", false, "delete every key starting with KEY")
	prev := fs.Bool("prev", false, "return the deleted records")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	req := schema.KVDeleteRequest{PrevKV: *prev}
	if *prefix {
		req.Prefix = &pos[0]
	} else {
		req.Key = &pos[0]
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.KVDeleteReply, error) { return c.Delete(ctx, req) })
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "deleted %d at revision %d\n", r.Deleted, r.Revision)
		for _, kv := range r.PrevKVs {
			fmt.Fprintln(w, keyValueText(kv))
		}
	})
}

func kvTxn(args []string) error {
	fs, cf := newFlags("kv txn", "kv txn [--file FILE]   (the transaction JSON, as P.kv.txn takes it, from FILE or stdin)")
	file := fs.String("file", "", "read the transaction from this file (\"-\" or absent: stdin)")
	if _, err := parseArgs(fs, args, 0, 0); err != nil {
		return err
	}
	var data []byte
	var err error
	if *file == "" || *file == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		return usagef("read the transaction: %v", err)
	}
	var req schema.KVTxnRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return usagef("the transaction is not a valid P.kv.txn request: %v", err)
	}
	if dec.More() {
		return usagef("the transaction has data after its JSON object")
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.KVTxnReply, error) { return c.Txn(ctx, req) })
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "succeeded: %t, revision %d\n", r.Succeeded, r.Revision)
		for i, resp := range r.Responses {
			switch {
			case resp.Put != nil:
				fmt.Fprintf(w, "[%d] put: revision %d\n", i, resp.Put.Revision)
				if resp.Put.PrevKV != nil {
					fmt.Fprintf(w, "    previous: %s\n", keyValueText(*resp.Put.PrevKV))
				}
			case resp.Get != nil:
				fmt.Fprintf(w, "[%d] get: %d of %d keys at revision %d\n", i, len(resp.Get.KVs), resp.Get.Count, resp.Get.Revision)
				for _, kv := range resp.Get.KVs {
					fmt.Fprintf(w, "    %s\n", keyValueText(kv))
				}
			case resp.Delete != nil:
				fmt.Fprintf(w, "[%d] delete: deleted %d at revision %d\n", i, resp.Delete.Deleted, resp.Delete.Revision)
				for _, kv := range resp.Delete.PrevKVs {
					fmt.Fprintf(w, "    %s\n", keyValueText(kv))
				}
			}
		}
	})
}

func kvHistory(args []string) error {
	fs, cf := newFlags("kv history", "kv history KEY [--from N] [--to N] [--limit N] [--newest-first] [--after N]\n\n"+
		"Prints the key's changes in the window [--from, --to], oldest first: one line per put (with the value\n"+
		"it wrote) and per delete (version 0, with its cause: delete, lease_expired or lease_revoked), as watch\n"+
		"prints events. A window starting at or below the compaction floor exits 7; one ending after the\n"+
		"current revision exits 1. A key with no changes in the window prints nothing and exits 0. When\n"+
		"records were left out, stderr says the --after to continue with.")
	var from, to, after optionalRevision
	fs.Var(&from, "from", "the window's first revision `N`, included (default: the oldest retained change)")
	fs.Var(&to, "to", "the window's last revision `N`, included (default: the present)")
	fs.Var(&after, "after", "continue a listing after revision `N` (before it, with --newest-first)")
	limit := fs.Int("limit", 0, "most records to return, up to 1000 (0: the server's default, 100)")
	newest := fs.Bool("newest-first", false, "list the newest change first")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	opts := []client.HistoryOption{client.FromRevision(from.n), client.ToRevision(to.n), client.AfterRevision(after.n), client.HistoryLimit(*limit)}
	if *newest {
		opts = append(opts, client.NewestFirst())
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.KVHistoryReply, error) {
		return c.History(ctx, pos[0], opts...)
	})
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		for _, e := range r.Records {
			fmt.Fprintln(w, eventText(e))
		}
		if r.More {
			fmt.Fprintf(os.Stderr, "%d records shown; continue with --after %d and the same flags\n", len(r.Records), r.NextRevision)
		}
	})
}

func kvCompact(args []string) error {
	fs, cf := newFlags("kv compact", "kv compact REV\n\n"+
		"Drops the history at and below revision REV on every replica (operators: with deploy/nats/roles.conf\n"+
		"only the replica role may). Reads at revisions below REV, history windows starting at or below it\n"+
		"and watches resuming from below it then exit 7. Compacting to or below the floor changes nothing;\n"+
		"a revision not yet written is refused (exit 1).")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	rev, err := strconv.ParseInt(pos[0], 10, 64)
	if err != nil || rev < 1 {
		return usagef("REV: %q is not a revision (an integer, 1 or more)", pos[0])
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.KVCompactReply, error) {
		return c.Compact(ctx, rev)
	})
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "compacted: the history starts after revision %d (current revision %d)\n", r.CompactRevision, r.Revision)
	})
}
