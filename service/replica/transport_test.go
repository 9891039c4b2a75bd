package replica

import (
	"fmt"
	"net"
	"testing"
)

// A Raft address given by host name is advertised by that name, so the
// cluster configuration survives the name moving to another IP; an IP
// address is advertised as bound.
func TestStreamLayerAdvertisesTheGivenName(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	for bind, want := range map[string]string{
		fmt.Sprintf("localhost:%d", port): fmt.Sprintf("localhost:%d", port),
		"127.0.0.1:0":                     "", // the port chosen
	} {
		l, err := NewStreamLayer(bind)
		if err != nil {
			t.Fatalf("%s: %v", bind, err)
		}
		got := l.Addr().String()
		if want == "" {
			want = l.ln.Addr().String()
		}
		if got != want || l.Addr().Network() != "tcp" {
			t.Errorf("bind %s advertises %s/%s, want %s", bind, l.Addr().Network(), got, want)
		}
		l.Close()
	}
	if _, err := NewStreamLayer("0.0.0.0:0"); err == nil {
		t.Error("an unspecified address was accepted")
	}
}
