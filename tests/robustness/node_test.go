package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/tests/freeport"
)

// nodeDeadline bounds every concord process a scenario starts: it is
// killed then whatever the scenario is doing.
const nodeDeadline = 5 * time.Minute

// node is one concord process of a scenario, restartable on the same data
// directory. Its log (all of its runs) is kept beside the data and shown
// when the scenario fails.
type node struct {
	t       *testing.T
	args    []string
	natsURL string
	logPath string
	// netns, when set, is the network namespace the process runs in
	// (nsenter), and the one its NATS URL is dialled from.
	netns string
	// bin, when set, is the binary to run instead of binPath (the
	// failpoints build); env is added to the process's environment.
	bin string
	env []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// newNode prepares a single-node concord (embedded NATS on a free loopback
// port) on dataDir; start runs it.
func newNode(t *testing.T, dataDir string, extra ...string) *node {
	t.Helper()
	natsAddr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	return newNodeWith(t, "", "nats://"+natsAddr, append([]string{"serve", "--node-id", "n1", "--data-dir", dataDir,
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", freeport.Port(t)), "--nats-listen", natsAddr}, extra...))
}

// newNodeWith prepares a concord process with the given arguments, in the
// network namespace netns unless it is "", reached at natsURL.
func newNodeWith(t *testing.T, netns, natsURL string, args []string) *node {
	t.Helper()
	n := &node{t: t, natsURL: natsURL, netns: netns, args: args, logPath: filepath.Join(t.TempDir(), "concord.log")}
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			if b, err := os.ReadFile(n.logPath); err == nil {
				t.Logf("concord log (%s):\n%s", n.logPath, tail(string(b), 80))
			}
		}
	})
	return n
}

// start runs the process. The child gets a process group of its own
// (killed as a whole), a deadline, and Pdeathsig, sent when the thread
// that forked it exits: that thread stays locked until the child is
// reaped, so the signal comes only with the test binary's own death.
func (n *node) start() {
	n.t.Helper()
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeDeadline)
	bin := binPath
	if n.bin != "" {
		bin = n.bin
	}
	cmd := exec.CommandContext(ctx, bin, n.args...)
	if n.netns != "" {
		// nsenter enters the network namespace only and execs the binary:
		// the same process, group and deadline. Not ip netns exec: that
		// also gives the process a mount namespace of its own, holding a
		// copy of every mount of the moment, so a lazyfs disk of another
		// node could not be unmounted (for a power cut) while it runs.
		cmd = exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + n.netns, "--", bin}, n.args...)...)
	}
	cmd.Env = append(os.Environ(), n.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		logf.Close()
		cancel()
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		close(done)
	}()
	if err := <-started; err != nil {
		cancel()
		logf.Close()
		n.t.Fatalf("start concord: %v", err)
	}
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
}

// kill sends SIGKILL to the process group and waits until it is gone.
func (n *node) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// exited reports whether the process has ended, and how.
func (n *node) exited() (bool, error) {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
		n.mu.Lock()
		defer n.mu.Unlock()
		return true, n.err
	default:
		return false, nil
	}
}

// waitServing polls until the node answers a read as leader, and fails the
// scenario if the process ends first: a node that cannot start after a
// power cut is the failure these scenarios look for.
func (n *node) waitServing(timeout time.Duration) {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if gone, err := n.exited(); gone {
			b, _ := os.ReadFile(n.logPath)
			n.t.Fatalf("concord exited before it served (%v); its log ends:\n%s", err, tail(string(b), 30))
		}
		if err := n.ping(); err == nil {
			return
		} else if time.Now().After(deadline) {
			n.t.Fatalf("concord did not serve within %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *node) ping() error {
	nc, err := connectFrom(n.netns, n.natsURL, nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	msg, err := nc.Request("concord.lease.list", []byte(`{}`), time.Second)
	if err != nil {
		return err
	}
	if msg.Header.Get(schema.HeaderErrorCode) != "" {
		return fmt.Errorf("not serving: %s", msg.Data)
	}
	return nil
}

// connectFrom connects to url from the network namespace netns ("" for
// this process's own).
func connectFrom(netns, url string, opts ...nats.Option) (*nats.Conn, error) {
	if netns != "" {
		opts = append(opts, nats.SetCustomDialer(nsDialer{netns: netns}))
	}
	return nats.Connect(url, opts...)
}

// request sends one request on nc and returns the reply body, or the
// error reply as an error.
func request(nc *nats.Conn, subject string, body any, timeout time.Duration) ([]byte, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	msg, err := nc.Request(subject, data, timeout)
	if err != nil {
		return nil, err
	}
	if msg.Header.Get(schema.HeaderErrorCode) != "" {
		return nil, errors.New(string(msg.Data))
	}
	return msg.Data, nil
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
