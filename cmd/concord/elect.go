package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

func runElect(args []string) error {
	fs, cf := newFlags("elect", "elect NAME [--ttl 10s] [--proclaim VALUE]")
	ttl := seconds{n: 10}
	fs.Var(&ttl, "ttl", "the session's lease ttl (with --proclaim)")
	proclaim := fs.String("proclaim", "", "campaign with VALUE (JSON, or else a string) and lead until interrupted")
	pos, err := parseArgs(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if ttl.n < 1 {
		return usagef("--ttl: at least 1s")
	}
	name := pos[0]
	if err := checkQueueName("election", name); err != nil {
		return err
	}
	var value []byte
	if isSet(fs, "proclaim") {
		if value, err = jsonValue(*proclaim, false, `give it as a JSON string ('"..."') to store the text`); err != nil {
			return err
		}
	}
	c, err := cf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	sctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if isSet(fs, "proclaim") {
		return campaign(sctx, cf, c, name, value, time.Duration(ttl.n)*time.Second)
	}
	return observe(sctx, cf, c, name)
}

// campaign leads the election until sctx ends (then resigns) or the
// session is lost.
func campaign(sctx context.Context, cf *common, c *client.Client, name string, value []byte, ttl time.Duration) error {
	ctx, cancel := cf.callCtx()
	s, err := c.NewSession(ctx, ttl)
	cancel()
	if err != nil {
		return err
	}
	closeSession := func() {
		ctx, cancel := cf.callCtx()
		defer cancel()
		if err := s.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "concord elect: revoke lease %d: %v\n", s.Lease(), err)
		}
	}
	e := client.NewElection(s, name)
	fmt.Fprintf(os.Stderr, "campaigning for %s (lease %d)\n", name, s.Lease())
	err = e.Campaign(sctx, value)
	switch {
	case sctx.Err() != nil:
		closeSession() // leaves the queue
		return nil
	case errors.Is(err, client.ErrSessionExpired):
		closeSession()
		return fmt.Errorf("campaigning for %s: %w", name, err)
	case err != nil:
		closeSession()
		return err
	}
	ctx, cancel = cf.callCtx()
	kv, err := c.Leader(ctx, name)
	cancel()
	if err == nil && kv.Lease == s.Lease() {
		_ = cf.output(kv, func(w io.Writer) { fmt.Fprintf(w, "leading %s: %s\n", name, leaderText(kv)) })
	} else {
		_ = cf.output(map[string]any{"lease": s.Lease(), "value": value}, func(w io.Writer) {
			fmt.Fprintf(w, "leading %s: lease=%d value=%s\n", name, s.Lease(), value)
		})
	}
	select {
	case <-sctx.Done():
		ctx, cancel := cf.callCtx()
		err := e.Resign(ctx)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "concord elect: resign: %v\n", err)
		}
		closeSession()
		fmt.Fprintf(os.Stderr, "resigned %s\n", name)
		return nil
	case <-s.Done():
		closeSession()
		return exitStatus{exitLost, fmt.Errorf("%w: no longer leading %s", errLost, name)}
	}
}

// observe prints the leader each time it changes until sctx ends.
func observe(sctx context.Context, cf *common, c *client.Client, name string) (err error) {
	// One read first: it checks the name and the connection, which
	// Observe would retry without end.
	ctx, cancel := cf.callCtx()
	_, err = c.Leader(ctx, name)
	cancel()
	if err != nil && !errors.Is(err, client.ErrNoLeader) {
		return cf.failed(err)
	}
	defer func() {
		// Observe retries everything but a refusal by NATS.
		if sctx.Err() == nil && err == nil {
			err = c.PermissionError()
		}
	}()
	for kv := range c.Observe(sctx, name) {
		if err := cf.output(kv, func(w io.Writer) {
			if kv == nil {
				fmt.Fprintf(w, "no leader\n")
				return
			}
			fmt.Fprintf(w, "leader %s\n", leaderText(kv))
		}); err != nil {
			return err
		}
	}
	return nil
}

// leaderText describes an election's leader on one line, value last.
func leaderText(kv *schema.KeyValue) string {
	return fmt.Sprintf("key=%s lease=%d create_revision=%d mod_revision=%d value=%s", kv.Key, kv.Lease, kv.CreateRevision, kv.ModRevision, kv.Value)
}
