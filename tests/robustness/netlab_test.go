package robustness

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// netLab is a small network of hosts for packet-level faults: each host is
// a network namespace of its own with one interface, all of them on a
// bridge that lives in a namespace of its own too, so that no address and
// no packet of the lab touches this machine's own namespace. Faults are
// nftables rules in a host's namespace: they drop packets in one direction
// or both, to one peer or to several, and are checked to have taken effect.
// Everything is removed when the test ends, whatever happened.
type netLab struct {
	t      *testing.T
	id     string
	sw     string            // the switch namespace, holding the bridge
	ns     map[string]string // host -> namespace
	ip     map[string]string // host -> address
	hosts  []string
	cutSet map[string]bool // hosts with rules in place
}

// labSubnet is the lab's subnet; it exists only inside its namespaces.
const labSubnet = "10.231.0"

// nftTable is the nftables table the faults live in, one per host.
const nftTable = "concordfault"

// requireNetLab skips (or, where the suite is required, fails) a scenario
// that needs ip and nft.
func requireNetLab(t *testing.T) {
	t.Helper()
	requireRoot(t)
	for _, tool := range []string{"ip", "nft", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CONCORD_REQUIRE_ROBUSTNESS") != "" {
				t.Fatalf("%s not found: the network scenarios need iproute2 and nftables (make robustness installs nftables)", tool)
			}
			t.Skipf("%s not found", tool)
		}
	}
}

// newNetLab makes a namespace per host, wired to one bridge.
func newNetLab(t *testing.T, hosts ...string) *netLab {
	t.Helper()
	requireNetLab(t)
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	l := &netLab{t: t, id: hex.EncodeToString(b), ns: map[string]string{}, ip: map[string]string{}, hosts: hosts, cutSet: map[string]bool{}}
	l.sw = nsPrefix() + l.id + "-sw"
	t.Cleanup(l.remove)
	l.run("ip", "netns", "add", l.sw)
	l.run("ip", "-n", l.sw, "link", "add", "br0", "type", "bridge")
	l.run("ip", "-n", l.sw, "link", "set", "br0", "up")
	for i, h := range hosts {
		ns := fmt.Sprintf("%s%s-%s", nsPrefix(), l.id, h)
		l.ns[h], l.ip[h] = ns, fmt.Sprintf("%s.%d", labSubnet, i+1)
		peer := fmt.Sprintf("v%d", i+1)
		l.run("ip", "netns", "add", ns)
		l.run("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", peer, "netns", l.sw)
		l.run("ip", "-n", l.sw, "link", "set", peer, "master", "br0")
		l.run("ip", "-n", l.sw, "link", "set", peer, "up")
		l.run("ip", "-n", ns, "addr", "add", l.ip[h]+"/24", "dev", "eth0")
		l.run("ip", "-n", ns, "link", "set", "eth0", "up")
		l.run("ip", "-n", ns, "link", "set", "lo", "up")
	}
	return l
}

// run runs a command of the lab's plumbing and fails the test on error.
func (l *netLab) run(name string, args ...string) {
	l.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// remove deletes every namespace of the lab (their interfaces and rules
// go with them).
func (l *netLab) remove() {
	for _, ns := range append([]string{l.sw}, mapValues(l.ns)...) {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			l.t.Errorf("remove network namespace %s: %v: %s", ns, err, out)
		}
	}
}

// nsPrefix starts the name of every namespace this test process makes:
// "cc-<pid>-". A run killed from outside never runs its clean-ups, and
// the next run's sweepNamespaces knows its leftovers by the dead pid.
func nsPrefix() string { return fmt.Sprintf("cc-%d-", os.Getpid()) }

// sweepNamespaces deletes the namespaces of test processes that are gone,
// and leaves those of any run still going (another suite on this machine).
func sweepNamespaces() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return // no ip: no namespaces of ours either
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, "cc-")
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); err != nil || n <= 0 {
			continue // not a name this suite makes
		} else if _, err := os.Stat(fmt.Sprintf("/proc/%d", n)); err == nil {
			continue
		}
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "remove the stale network namespace %s: %v: %s\n", name, err, out)
		} else {
			fmt.Fprintf(os.Stderr, "removed the stale network namespace %s, left by a run that was killed\n", name)
		}
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// direction says which packets a cut drops, seen from the host it is made on.
type direction int

const (
	both     direction = iota
	inbound            // packets from the peers
	outbound           // packets to the peers
)

// cut drops packets between host and each of peers, in dir as seen from
// host. Rules add up until heal.
func (l *netLab) cut(host string, dir direction, peers ...string) {
	l.t.Helper()
	ns := l.ns[host]
	if !l.cutSet[host] {
		l.nft(ns, "add table inet "+nftTable)
		l.nft(ns, "add chain inet "+nftTable+" in { type filter hook input priority 0; policy accept; }")
		l.nft(ns, "add chain inet "+nftTable+" out { type filter hook output priority 0; policy accept; }")
		l.cutSet[host] = true
	}
	for _, p := range peers {
		if dir == both || dir == inbound {
			l.nft(ns, "add rule inet "+nftTable+" in ip saddr "+l.ip[p]+" drop")
		}
		if dir == both || dir == outbound {
			l.nft(ns, "add rule inet "+nftTable+" out ip daddr "+l.ip[p]+" drop")
		}
	}
}

// heal removes every cut.
func (l *netLab) heal() {
	l.t.Helper()
	for h := range l.cutSet {
		l.nft(l.ns[h], "delete table inet "+nftTable)
	}
	l.cutSet = map[string]bool{}
}

func (l *netLab) nft(ns, rule string) {
	l.t.Helper()
	l.run("nsenter", "--net=/run/netns/"+ns, "nft", rule)
}

// reaches reports whether a TCP connection from host to addr opens within
// timeout: how a scenario checks that a cut took effect, and a heal.
func (l *netLab) reaches(host, addr string, timeout time.Duration) bool {
	c, err := nsDialer{netns: l.ns[host], timeout: timeout}.Dial("tcp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// nsDialer dials from inside a network namespace: nats.go's custom dialer
// for clients that live in the lab.
type nsDialer struct {
	netns   string
	timeout time.Duration
}

// Dial opens the connection on a thread that entered the namespace. The
// socket belongs to the namespace it was made in, and keeps it wherever it
// is used from; the thread is never unlocked, so it exits with its
// goroutine and no other goroutine ever runs in the namespace.
func (d nsDialer) Dial(network, address string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+d.netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: fmt.Errorf("open namespace %s: %w", d.netns, err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			ch <- result{err: fmt.Errorf("enter namespace %s: %w", d.netns, err)}
			return
		}
		timeout := d.timeout
		if timeout == 0 {
			timeout = 2 * time.Second
		}
		c, err := net.DialTimeout(network, address, timeout)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
