// Package freeport hands tests loopback TCP ports to give a node before it
// binds them. It picks below the kernel's ephemeral range: a port the
// kernel chose for a listener and got back on close is, until the node
// binds it, free for the kernel to give to any outgoing connection (a
// NATS client dialling, a Raft peer), and a node then fails with "address
// already in use". Ports below that range are never given out that way.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const lowest = 10000

var (
	mu   sync.Mutex
	next int
	// handedOut holds the ports this process has given out: a cluster asks
	// for a dozen before any node binds one.
	handedOut = map[int]bool{}
)

// Port returns a loopback TCP port nobody listens on, that this process
// has not handed out before, and that lies below the ephemeral range.
func Port(t testing.TB) int {
	t.Helper()
	p, err := pick()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Addr returns "127.0.0.1:<Port>".
func Addr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Port(t))
}

func pick() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	top := ephemeralLow()
	span := top - lowest
	if next == 0 {
		// Processes started together (go test runs packages in parallel)
		// start at different places, so they rarely try the same port.
		next = lowest + rand.IntN(span)
	}
	for tries := 0; tries < span; tries++ {
		p := next
		next++
		if next >= top {
			next = lowest
		}
		if handedOut[p] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		l.Close()
		handedOut[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("freeport: no free port in %d-%d", lowest, top-1)
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low <= lowest+1000 {
		return 32768
	}
	return low
}
