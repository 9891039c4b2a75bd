package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsAreBelowTheEphemeralRangeBindableAndNeverRepeated(t *testing.T) {
	top := ephemeralLow()
	seen := map[int]bool{}
	for i := 0; i < 200; i++ {
		p := Port(t)
		if p < lowest || p >= top {
			t.Fatalf("port %d outside %d-%d", p, lowest, top-1)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	// A port somebody listens on is skipped, even if never handed out.
	taken := Port(t)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(taken)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mu.Lock()
	delete(handedOut, taken)
	next = taken
	mu.Unlock()
	if p := Port(t); p == taken {
		t.Fatalf("handed out %d, which is listened on", p)
	}
}
