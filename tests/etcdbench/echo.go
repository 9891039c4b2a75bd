package main

import (
	"context"
	"flag"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
)

// echoSubject is where the echo responder listens: outside Concord's
// subject space, on the same bus.
const echoSubject = "concord-bench.echo"

// runEchoResponder is the floor any NATS-fronted service sits on: one
// subscription in a queue group that answers every request with the bytes
// it carried, nothing else. It runs until SIGTERM or SIGINT.
func runEchoResponder(args []string) error {
	fs := flag.NewFlagSet("echo-responder", flag.ContinueOnError)
	url := fs.String("url", nats.DefaultURL, "NATS URL to connect to")
	subject := fs.String("subject", echoSubject, "subject to answer on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	nc, err := nats.Connect(*url, nats.Name("concord-bench-echo"))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", *url, err)
	}
	defer nc.Close()
	// The callback runs on the subscription's one goroutine, in order, as
	// the simplest responder does; with nothing to do but copy, handing
	// each request to a goroutine would only add a hand-off.
	sub, err := nc.QueueSubscribe(*subject, "echo", func(m *nats.Msg) {
		_ = m.Respond(m.Data) // a requester that gave up is not our problem
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", *subject, err)
	}
	<-ctx.Done()
	return sub.Drain()
}
