package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
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
	fs, cf := newFlags("kv put", "kv put KEY VALUE|- [--file FILE] [--string] [--lease ID | --ttl N] [--content-type T] [--metadata JSON] [--prev]\n\n"+
		"VALUE \"-\" reads the value from stdin; --file reads it from FILE. Either way the value is the\n"+
		"whole input, a final newline included, taken as JSON if it parses as JSON and as a string otherwise;\n"+
		"text that starts like JSON ({, [ or \") but does not parse is an error. --string stores it as a string\n"+
		"whatever it looks like.\n"+
		"To store the string \"-\" itself, give it as JSON: '\"-\"'.\n\n"+
		"--content-type (printable ASCII, at most 256 bytes) and --metadata (a JSON object, at most 4 KiB) are\n"+
		"stored with the value and returned unchanged by kv get, kv history and watch. A put replaces the whole\n"+
		"record: a put without them clears the ones the key had. --metadata that is not JSON exits 2; JSON that\n"+
		"the server refuses (not an object, too large) exits 1.")
	lease := fs.Int64("lease", 0, "attach the key to this lease")
	var ttl seconds
	fs.Var(&ttl, "ttl", "attach the key to its own anonymous lease of this ttl")
	prev := fs.Bool("prev", false, "return the previous record")
	asString := fs.Bool("string", false, "store the value as a JSON string, even if it parses as JSON or starts like it")
	file := fs.String("file", "", "read the value from `FILE` (\"-\": stdin) instead of the VALUE argument")
	contentType := fs.String("content-type", "", "store this content type `T` with the value, such as application/json")
	metadata := fs.String("metadata", "", "store this `JSON` object with the value")
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
	value, err := jsonValue(text, *asString, "give --string to store the text as a string")
	if err != nil {
		return err
	}
	req := schema.KVPutRequest{Key: pos[0], Value: value, PrevKV: *prev, ContentType: *contentType}
	if isSet(fs, "metadata") {
		if !json.Valid([]byte(*metadata)) {
			return usagef("--metadata: not valid JSON: %s", *metadata)
		}
		req.Metadata = json.RawMessage(*metadata)
	}
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
				fmt.Fprintf(w, "previous: %s\n", recordText(*r.PrevKV, "  "))
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
	fs, cf := newFlags("kv get", "kv get KEY [--prefix] [--rev N] [--limit N] [--after KEY] [--keys-only] [--count] [--serializable]\n"+
		"       concord kv get --from A [--to B] [--rev N] [--limit N] [--after KEY] [--keys-only] [--count] [--serializable]\n\n"+
		"--from A --to B reads the keys in the byte-wise range [A, B): A included, B not; without --to, to the end\n"+
		"of the keyspace. Ranges and --prefix compare bytes, not tokens: --prefix svc also matches svcx.a, while\n"+
		"--from svc. --to svc/ is every key under svc. and no other ('/' follows '.').\n\n"+
		"--rev N reads the keys as they stood right after revision N committed (no remaining lease time is\n"+
		"shown); a revision below the compaction floor exits 7, one not yet written exits 1. Continue a prefix\n"+
		"or range read with --after at the same --rev to see the same snapshot, page after page.\n\n"+
		"Each key prints as \"KEY VALUE\"; a key stored with a content type or metadata (kv put --content-type,\n"+
		"--metadata) has them on the lines below it, indented: \"  content_type: T\" and \"  metadata: JSON\".")
	prefix := fs.Bool("prefix", false, "read every key starting with KEY (\"\" for all keys)")
	from := fs.String("from", "", "read the range that starts at key `A` (included), instead of KEY")
	to := fs.String("to", "", "end the --from range before key `B` (default: the end of the keyspace)")
	var rev optionalRevision
	fs.Var(&rev, "rev", "read at revision `N` (0 or absent: the present)")
	limit := fs.Int("limit", 0, "most records to return (0: the server's default)")
	after := fs.String("after", "", "continue a prefix or range read after this key")
	keysOnly := fs.Bool("keys-only", false, "leave the values out")
	count := fs.Bool("count", false, "print only the number of matching keys")
	serializable := fs.Bool("serializable", false, "read without confirming leadership (may be stale)")
	pos, err := parseArgs(fs, args, 0, 1)
	if err != nil {
		return err
	}
	req := schema.KVGetRequest{Limit: *limit, After: *after, KeysOnly: *keysOnly, CountOnly: *count, Serializable: *serializable, Revision: rev.n}
	single := false
	switch sel, err := selectKeys(fs, pos, *from, *to); {
	case err != nil:
		return err
	case sel.rangeStart != nil:
		req.RangeStart, req.RangeEnd = sel.rangeStart, sel.rangeEnd
	case *prefix:
		req.Prefix = &pos[0]
	default:
		req.Key, single = &pos[0], true
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
			fmt.Fprintln(w, recordText(kv, "  "))
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
	if single && r.Count == 0 {
		if rev.n != 0 {
			return exitStatus{exitNotFound, fmt.Errorf("key %s at revision %d: %w", pos[0], rev.n, errNotFound)}
		}
		return exitStatus{exitNotFound, fmt.Errorf("key %s: %w", pos[0], errNotFound)}
	}
	return nil
}

// keySelection is a range given with --from and --to, or nothing when the
// command names KEY instead.
type keySelection struct {
	rangeStart, rangeEnd *string
}

// selectKeys checks that a kv get or del names either KEY (with --prefix
// or not) or a range (--from, with --to or not), and returns the range.
// The server checks the range itself (--to after --from, printable bytes),
// so its description reaches the user unchanged.
func selectKeys(fs *flag.FlagSet, pos []string, from, to string) (keySelection, error) {
	hasFrom, hasTo := isSet(fs, "from"), isSet(fs, "to")
	switch {
	case hasTo && !hasFrom:
		return keySelection{}, usagef("--to needs --from: a range is [--from, --to)")
	case hasFrom && len(pos) > 0:
		return keySelection{}, usagef("give KEY or --from, not both")
	case hasFrom && isSet(fs, "prefix"):
		return keySelection{}, usagef("give --prefix or --from, not both")
	case !hasFrom && len(pos) == 0:
		return keySelection{}, usagef("missing KEY (or --from A [--to B] for a range)")
	case !hasFrom:
		return keySelection{}, nil
	}
	sel := keySelection{rangeStart: &from}
	if hasTo {
		sel.rangeEnd = &to
	}
	return sel, nil
}

// recordText is keyValueText, followed by the record's content type and
// metadata, when it has them, each on a line of its own after indent:
// "KEY VALUE" stays one line for records without them.
func recordText(kv schema.KeyValue, indent string) string {
	s := keyValueText(kv)
	if kv.ContentType != "" {
		s += "\n" + indent + "content_type: " + kv.ContentType
	}
	if len(kv.Metadata) > 0 {
		s += "\n" + indent + "metadata: " + string(kv.Metadata)
	}
	return s
}

// keyValueText is "KEY VALUE" for a record, or KEY alone without a value.
func keyValueText(kv schema.KeyValue) string {
	if len(kv.Value) == 0 {
		return kv.Key
	}
	return kv.Key + " " + string(kv.Value)
}

func kvDel(args []string) error {
	fs, cf := newFlags("kv del", "kv del KEY [--prefix] [--prev]\n"+
		"       concord kv del --from A [--to B] [--prev]\n\n"+
		"--from A --to B deletes every key in the byte-wise range [A, B) at one revision; without --to, to the\n"+
		"end of the keyspace. --from svc. --to svc/ is every key under svc. and no other.")
	prefix := fs.Bool("prefix", false, "delete every key starting with KEY")
	from := fs.String("from", "", "delete the range that starts at key `A` (included), instead of KEY")
	to := fs.String("to", "", "end the --from range before key `B` (default: the end of the keyspace)")
	prev := fs.Bool("prev", false, "return the deleted records")
	pos, err := parseArgs(fs, args, 0, 1)
	if err != nil {
		return err
	}
	req := schema.KVDeleteRequest{PrevKV: *prev}
	switch sel, err := selectKeys(fs, pos, *from, *to); {
	case err != nil:
		return err
	case sel.rangeStart != nil:
		req.RangeStart, req.RangeEnd = sel.rangeStart, sel.rangeEnd
	case *prefix:
		req.Prefix = &pos[0]
	default:
		req.Key = &pos[0]
	}
	r, err := callOnce(cf, func(ctx context.Context, c *client.Client) (*schema.KVDeleteReply, error) { return c.Delete(ctx, req) })
	if err != nil {
		return err
	}
	return cf.output(r, func(w io.Writer) {
		fmt.Fprintf(w, "deleted %d at revision %d\n", r.Deleted, r.Revision)
		for _, kv := range r.PrevKVs {
			fmt.Fprintln(w, recordText(kv, "  "))
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
					fmt.Fprintf(w, "    previous: %s\n", recordText(*resp.Put.PrevKV, "      "))
				}
			case resp.Get != nil:
				fmt.Fprintf(w, "[%d] get: %d of %d keys at revision %d\n", i, len(resp.Get.KVs), resp.Get.Count, resp.Get.Revision)
				for _, kv := range resp.Get.KVs {
					fmt.Fprintf(w, "    %s\n", recordText(kv, "      "))
				}
			case resp.Delete != nil:
				fmt.Fprintf(w, "[%d] delete: deleted %d at revision %d\n", i, resp.Delete.Deleted, resp.Delete.Revision)
				for _, kv := range resp.Delete.PrevKVs {
					fmt.Fprintf(w, "    %s\n", recordText(kv, "      "))
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
