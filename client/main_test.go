package client_test

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/service"
)

// serverURL is a single-node Concord the tests and examples share.
var serverURL string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "concord-client-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	svc, err := startService(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	serverURL = svc.NATSURL()
	code := m.Run()
	svc.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startService starts an in-process node on random ports and waits until
// it serves.
func startService(dir string) (*service.Service, error) {
	return startServiceAt(dir, "127.0.0.1:0")
}

// startServiceAt starts an in-process node whose NATS listens on
// natsListen, and waits until it serves.
func startServiceAt(dir, natsListen string) (*service.Service, error) {
	cfg := service.DefaultConfig()
	cfg.DataDir = dir
	cfg.NATSListen = natsListen
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := service.Start(cfg)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(svc.NATSURL())
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if msg, err := nc.Request("concord.lease.list", []byte(`{}`), time.Second); err == nil && msg.Header.Get("Nats-Service-Error-Code") == "" {
			return svc, nil
		}
	}
	svc.Close()
	return nil, fmt.Errorf("node not serving")
}

func connect(t *testing.T) *clientT {
	t.Helper()
	c, err := clientConnect(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
