package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Every process a test starts goes through newProc, which gives it what a
// hung or failed test needs so that nothing outlives it:
//
//   - a deadline: the timeout given, and never later than killMargin before
//     the test binary's own -timeout, so a hung child is killed and the
//     test fails with its output instead of the binary panicking with
//     children left running;
//   - its own process group, killed as a whole (SIGKILL) at the deadline
//     and in t.Cleanup, whatever the test did;
//   - a marker variable in its environment (procMarkerPrefix + a sequence
//     number, valued with the test's name), which its descendants inherit:
//     at the end of the test, and at the deadline, every live process with
//     the marker is killed, also those that left the group (a `concord
//     lock` child, a daemon started with setsid);
//   - Pdeathsig SIGKILL, so that it dies with the test binary even when no
//     Cleanup runs (the binary is killed, or panics). The kernel sends that
//     signal when the *thread* that forked the child exits, not the
//     process (go.dev/issue/27505), and the Go runtime ends a thread when a
//     goroutine locked to it exits. So start forks from a goroutine of its
//     own that stays locked to its thread until the child is reaped: that
//     thread cannot exit while the child lives, whatever the calling
//     goroutine does.
//
// CONCORD_TEST_RUN, set by `make test`, is passed on too, so that the
// Makefile can check at the end that no process of the run is alive.

// killMargin is how long before the test binary's -timeout every process
// is killed.
const killMargin = 20 * time.Second

// procHelperVar, set in a child test binary, selects what TestProcHelper
// does there (proc_cleanup_linux_test.go).
const procHelperVar = "CONCORD_TEST_PROC_HELPER"

// runMarkerVar names the marker `make test` sets for the whole run.
const runMarkerVar = "CONCORD_TEST_RUN"

// procMarkerPrefix starts the name of every process marker of this test
// binary.
var procMarkerPrefix = fmt.Sprintf("CONCORD_TEST_PROC_%d_", os.Getpid())

var procSeq atomic.Int64

// liveProcs holds every started process not yet reaped, for killAllProcs.
var liveProcs sync.Map // *proc -> struct{}

// proc is a child process owned by a test. Set fields of cmd (Dir, Env,
// Stdin, Stdout, Stderr, ...) before starting it; do not call cmd's Start,
// Run, Wait or Output methods: use the proc's.
type proc struct {
	t       testing.TB // nil for TestMain's own children
	cmd     *exec.Cmd
	marker  string // environment variable name
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed once the process has exited and been reaped
	err     error         // cmd.Wait's result, once done is closed
	expired atomic.Bool   // the deadline came while the process ran

	mu      sync.Mutex
	pid     int  // once started
	owned   bool // started by start: the group kill is safe until reaping
	reaping bool // the leader has exited; its pid is about to be freed
}

// newProc prepares name with args as a process of the test t, killed
// timeout after this call at the latest (0: only the test binary's
// deadline bounds it) and when the test ends. t may be nil only in TestMain, whose
// caller must wait for or kill the process itself.
func newProc(t testing.TB, timeout time.Duration, name string, args ...string) *proc {
	if t != nil {
		t.Helper()
	}
	p := &proc{t: t, timeout: timeout, done: make(chan struct{}),
		marker: fmt.Sprintf("%s%d", procMarkerPrefix, procSeq.Add(1))}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	if d, ok := binaryDeadline(t); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	// Not t.Context(): it is canceled before any Cleanup runs, which would
	// kill a server while earlier-registered cleanups still use it. This
	// context is canceled by the process's own Cleanup, in LIFO order.
	if deadline.IsZero() {
		p.ctx, p.cancel = context.WithCancel(context.Background())
	} else {
		p.ctx, p.cancel = context.WithDeadline(context.Background(), deadline)
	}
	p.cmd = exec.CommandContext(p.ctx, name, args...)
	p.cmd.Cancel = func() error {
		if errors.Is(p.ctx.Err(), context.DeadlineExceeded) {
			p.expired.Store(true)
		}
		p.killTree(p.cmd.Process.Pid)
		killMarked(func(k string) bool { return k == p.marker })
		return nil
	}
	// Once the process is gone, pipes a descendant still holds are closed
	// after this long rather than blocking Wait.
	p.cmd.WaitDelay = 10 * time.Second
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Set now as well as at start, so that a caller who appends to Env
	// keeps the markers.
	p.cmd.Env = p.environ(os.Environ())
	if t != nil {
		trackTestProc(t, p.marker)
		t.Cleanup(p.cleanup)
	}
	return p
}

// binaryDeadline is killMargin before the test binary's -timeout (but no
// earlier than half the time left).
func binaryDeadline(t testing.TB) (time.Time, bool) {
	dt, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return time.Time{}, false
	}
	d, ok := dt.Deadline()
	if !ok {
		return time.Time{}, false
	}
	margin := killMargin
	if left := time.Until(d); left < 2*margin {
		margin = left / 2
	}
	return d.Add(-margin), true
}

// environ returns env with this process's marker, and the run's marker
// unless env sets one of its own.
func (p *proc) environ(env []string) []string {
	name := "?"
	if p.t != nil {
		name = p.t.Name()
	}
	out := append(env[:len(env):len(env)], p.marker+"="+name)
	if run := os.Getenv(runMarkerVar); run != "" && !hasEnv(env, runMarkerVar) {
		out = append(out, runMarkerVar+"="+run)
	}
	return out
}

func hasEnv(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}

// start starts the process (see the comment at the top for why from a
// goroutine locked to its thread) and waits for it in the background.
func (p *proc) start() error {
	if p.cmd.Env == nil {
		p.cmd.Env = os.Environ()
	}
	p.cmd.Env = p.environ(p.cmd.Env)
	setDeathSignal(p.cmd.SysProcAttr)
	p.mu.Lock()
	p.owned = true
	p.mu.Unlock()
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only once the child is reaped: until then this thread
		// must not exit, or the kernel sends the child its Pdeathsig.
		defer runtime.UnlockOSThread()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		pid := p.cmd.Process.Pid
		p.mu.Lock()
		p.pid = pid
		p.mu.Unlock()
		liveProcs.Store(p, struct{}{})
		started <- nil
		// Wait for the exit without reaping: while the leader is an
		// unreaped zombie its pid, the group's id, cannot be reused, so
		// killTree's kill(-pid) reaches our group and nothing else.
		_ = waitExited(pid)
		p.mu.Lock()
		p.reaping = true
		p.mu.Unlock()
		p.err = p.cmd.Wait()
		if p.timedOut() {
			p.err = fmt.Errorf("%s: killed at its deadline (timeout %v, or the test binary's -timeout): %w", p.cmd.Path, p.timeout, p.err)
		}
		liveProcs.Delete(p)
		close(p.done)
	}()
	return <-started
}

// killTree sends SIGKILL to the process's group while the leader is not
// reaped, and to the leader alone otherwise (descendants that are left
// carry the marker and are found by killMarked).
func (p *proc) killTree(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owned && !p.reaping {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return
	}
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill() // through a pidfd: safe after reaping
	}
}

// wait waits for the process to exit and returns what cmd.Wait returned,
// wrapped with a note when the deadline killed it.
func (p *proc) wait() error {
	<-p.done
	return p.err
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// timedOut reports whether the deadline killed the process.
func (p *proc) timedOut() bool {
	return p.expired.Load()
}

// run starts the process and waits for it.
func (p *proc) run() error {
	if err := p.start(); err != nil {
		return err
	}
	return p.wait()
}

// output runs the process and returns its stdout; like exec.Cmd.Output,
// a failure's *exec.ExitError carries stderr, unless Stderr is set.
func (p *proc) output() ([]byte, error) {
	var stdout, stderr bytes.Buffer
	p.cmd.Stdout = &stdout
	captureStderr := p.cmd.Stderr == nil
	if captureStderr {
		p.cmd.Stderr = &stderr
	}
	err := p.run()
	var ee *exec.ExitError
	if captureStderr && errors.As(err, &ee) {
		ee.Stderr = stderr.Bytes()
	}
	return stdout.Bytes(), err
}

// combinedOutput runs the process and returns its stdout and stderr.
func (p *proc) combinedOutput() ([]byte, error) {
	var out lockedBuffer
	p.cmd.Stdout, p.cmd.Stderr = &out, &out
	err := p.run()
	return []byte(out.String()), err
}

// kill kills the process, its group and its other descendants, and waits
// until it is reaped.
func (p *proc) kill() {
	p.mu.Lock()
	pid := p.pid
	p.mu.Unlock()
	if pid == 0 || p.exited() {
		return // never started, or done (trackTestProc's Cleanup sweeps)
	}
	p.killTree(pid)
	// Wait would otherwise wait WaitDelay for a descendant that holds the
	// output pipes.
	killMarked(func(k string) bool { return k == p.marker })
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		if p.t != nil {
			p.t.Errorf("process %d (%s) still not reaped 30 s after SIGKILL", pid, p.cmd.Path)
		}
	}
}

// cleanup kills the process when its test ends.
func (p *proc) cleanup() {
	p.kill()
	p.cancel()
}

// testProcs maps a test to the markers of the processes it started.
var testProcs sync.Map // testing.TB -> *markerSet

type markerSet struct {
	mu      sync.Mutex
	markers map[string]bool
}

// trackTestProc records marker as one of t's; the first time for t it
// registers the Cleanup that kills every descendant left with one of t's
// markers. Registered before the processes' own Cleanups, it runs after
// them.
func trackTestProc(t testing.TB, marker string) {
	v, loaded := testProcs.LoadOrStore(t, &markerSet{markers: map[string]bool{}})
	set := v.(*markerSet)
	set.mu.Lock()
	set.markers[marker] = true
	set.mu.Unlock()
	if loaded {
		return
	}
	t.Cleanup(func() {
		testProcs.Delete(t)
		set.mu.Lock()
		defer set.mu.Unlock()
		for _, l := range killMarked(func(k string) bool { return set.markers[k] }) {
			t.Logf("killed a process the test left behind: %s", l)
		}
	})
}

// killAllProcs kills every process this binary started, and every
// descendant that carries one of its markers; it returns the descendants.
func killAllProcs() []leftover {
	liveProcs.Range(func(k, _ any) bool {
		p := k.(*proc)
		p.mu.Lock()
		pid := p.pid
		p.mu.Unlock()
		p.killTree(pid)
		return true
	})
	return killMarked(func(k string) bool { return strings.HasPrefix(k, procMarkerPrefix) })
}

// leftover is a live process found by its marker.
type leftover struct {
	pid     int
	cmdline string
	test    string // the marker's value: the test that started it or its ancestor
}

func (l leftover) String() string {
	return fmt.Sprintf("pid %d (%s), started by %s", l.pid, l.cmdline, l.test)
}
