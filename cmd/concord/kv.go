package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

func runKV(args []string) error {
	return subcommand("kv", args, map[string]func([]string) error{
		"put": kvPut,
		"get": kvGet,
		"del": kvDel,
		"txn": kvTxn,
	}, "put|get|del|txn")
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
	fs, cf := newFlags("kv get", "kv get KEY [--prefix] [--limit N] [--after KEY] [--keys-only] [--count] [--serializable]")
	prefix := fs.Bool("prefix", false, "read every key starting with KEY (\"\" for all keys)")
	limit := fs.Int("limit", 0, "most records to return (0: the server's default)")
	after := fs.String("after", "", "continue a prefix read after this key")
	keysOnly := fs.Bool("keys-only", false, "leave the values out")
	count := fs.Bool("count", false, "print only the number of matching keys")
	serializable := fs.Bool("serializable", false, "read without confirming leadership (may be stale)")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	req := schema.KVGetRequest{Limit: *limit, After: *after, KeysOnly: *keysOnly, CountOnly: *count, Serializable: *serializable}
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
			fmt.Fprintf(os.Stderr, "%d of %d keys shown; continue with --after %s\n", len(r.KVs), r.Count, r.KVs[len(r.KVs)-1].Key)
		}
	}); err != nil {
		return err
	}
	if !*prefix && r.Count == 0 {
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
