package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

func runWatch(args []string) error {
	fs, cf := newFlags("watch", "watch KEY [--prefix] [--from REV]")
	prefix := fs.Bool("prefix", false, "watch every key starting with KEY (\"\" for all keys)")
	var from optionalRevision
	fs.Var(&from, "from", "print the events after revision `REV` (default: from the current revision on)")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	key := pos[0]
	c, err := cf.connect()
	if err != nil {
		return err
	}
	defer c.Close()

	// Read first: it checks the key and finds the current revision.
	req := schema.KVGetRequest{CountOnly: true}
	if *prefix {
		req.Prefix = &key
	} else {
		req.Key = &key
	}
	ctx, cancel := cf.callCtx()
	g, err := c.Get(ctx, req)
	cancel()
	if err != nil {
		return cf.failed(err)
	}
	rev := g.Revision
	if from.set {
		rev = from.n
	}

	sctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := c.Watch(sctx, key, *prefix, rev)
	if err != nil {
		return err
	}
	what := "key " + key
	if *prefix {
		what = "prefix " + key
	}
	fmt.Fprintf(os.Stderr, "watching %s after revision %d\n", what, rev)
	for e := range w.Events() {
		if cf.json {
			if err := printJSON(os.Stdout, e); err != nil {
				return err
			}
			continue
		}
		fmt.Println(eventText(e))
	}
	err = w.Err()
	switch {
	case sctx.Err() != nil:
		return nil // interrupted: the normal end
	case errors.Is(err, client.ErrCompacted):
		return fmt.Errorf("%w\nthe change log no longer holds the events after revision %d: re-read the keys (concord kv get) and resume with --from at the revision of that read", err, rev)
	}
	return err
}

// eventText is one event on one line, value last. A put's content type
// and metadata, when it has them, come just before the value (metadata is
// compact JSON, so it holds no newline).
func eventText(e schema.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "revision=%d op_index=%d type=%s key=%s cause=%s", e.Revision, e.OpIndex, e.Type, e.Key, e.Cause)
	if e.Lease != 0 {
		fmt.Fprintf(&b, " lease=%d", e.Lease)
	}
	if e.ContentType != "" {
		fmt.Fprintf(&b, " content_type=%s", fieldText(e.ContentType))
	}
	if len(e.Metadata) > 0 {
		fmt.Fprintf(&b, " metadata=%s", e.Metadata)
	}
	if e.Type == schema.EventPut {
		fmt.Fprintf(&b, " value=%s", e.Value)
	}
	return b.String()
}

// fieldText is a content type as one name=value field: quoted (Go
// syntax) when it holds a space or a quote, which would end the field.
func fieldText(s string) string {
	if strings.ContainsAny(s, " \"\\") {
		return strconv.Quote(s)
	}
	return s
}

// optionalRevision is --from: a revision, or unset. Unset prints as ""
// so that -h shows no "(default ...)" of its own.
type optionalRevision struct {
	n   int64
	set bool
}

func (r *optionalRevision) String() string {
	if r == nil || !r.set {
		return ""
	}
	return strconv.FormatInt(r.n, 10)
}

func (r *optionalRevision) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a revision (an integer, 0 or more)", v)
	}
	r.n, r.set = n, true
	return nil
}
