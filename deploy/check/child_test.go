package check

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// killMargin is how long before the test binary's -timeout every child is
// killed.
const killMargin = 20 * time.Second

// child is a process a test starts, the part of the main module's
// tests/proc_test.go that these checks need (this module cannot import it):
// a deadline (the timeout given, and killMargin before the binary's
// -timeout), a process group of its own killed in t.Cleanup whatever
// happens, and Pdeathsig SIGKILL so that it dies with the test binary. The
// kernel sends that signal when the thread that forked the child exits, so
// start forks from a goroutine locked to its thread until the child is
// reaped. The environment, and so `make test`'s CONCORD_TEST_RUN marker,
// is inherited unless a caller replaces Env without it.
type child struct {
	t       testing.TB // nil for TestMain's builds
	cmd     *exec.Cmd
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{} // closed once the process is reaped
	err     error         // cmd.Wait's result, once done is closed

	mu      sync.Mutex
	pid     int
	reaping bool // the leader has exited; its pid is about to be freed
}

// newChild prepares name with args as a child of the test t, killed
// timeout after this call at the latest (0: only the binary's deadline)
// and when the test ends. With t nil the caller must wait for it.
func newChild(t testing.TB, timeout time.Duration, name string, args ...string) *child {
	c := &child{t: t, timeout: timeout, done: make(chan struct{})}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	if dt, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := dt.Deadline(); ok {
			margin := min(killMargin, time.Until(d)/2)
			if d = d.Add(-margin); deadline.IsZero() || d.Before(deadline) {
				deadline = d
			}
		}
	}
	if deadline.IsZero() {
		c.ctx, c.cancel = context.WithCancel(context.Background())
	} else {
		c.ctx, c.cancel = context.WithDeadline(context.Background(), deadline)
	}
	c.cmd = exec.CommandContext(c.ctx, name, args...)
	c.cmd.Cancel = func() error {
		c.killGroup()
		return nil
	}
	c.cmd.WaitDelay = 10 * time.Second
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if t != nil {
		t.Cleanup(func() {
			c.kill()
			c.cancel()
		})
	}
	return c
}

// start starts the process and waits for it in the background.
func (c *child) start() error {
	setDeathSignal(c.cmd.SysProcAttr)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked once the child is reaped: until then this thread must
		// not exit, or the kernel sends the child its Pdeathsig.
		defer runtime.UnlockOSThread()
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		c.mu.Lock()
		c.pid = c.cmd.Process.Pid
		c.mu.Unlock()
		started <- nil
		// Exited but not reaped, the leader's pid (the group's id) cannot
		// be reused, so killGroup reaches our group and nothing else.
		_ = waitExited(c.cmd.Process.Pid)
		c.mu.Lock()
		c.reaping = true
		c.mu.Unlock()
		c.err = c.cmd.Wait()
		if errors.Is(c.ctx.Err(), context.DeadlineExceeded) && c.err != nil {
			c.err = fmt.Errorf("%s: killed at its deadline (timeout %v, or the test binary's -timeout): %w", c.cmd.Path, c.timeout, c.err)
		}
		close(c.done)
	}()
	return <-started
}

// killGroup sends SIGKILL to the child's process group, or to the child
// alone once it is being reaped.
func (c *child) killGroup() {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.pid == 0:
	case !c.reaping:
		_ = syscall.Kill(-c.pid, syscall.SIGKILL)
	default:
		_ = c.cmd.Process.Kill() // through a pidfd: safe after reaping
	}
}

// wait waits for the process to exit.
func (c *child) wait() error {
	<-c.done
	return c.err
}

// run starts the process and waits for it.
func (c *child) run() error {
	if err := c.start(); err != nil {
		return err
	}
	return c.wait()
}

// combinedOutput runs the process and returns its stdout and stderr.
func (c *child) combinedOutput() ([]byte, error) {
	var out bytes.Buffer
	c.cmd.Stdout, c.cmd.Stderr = &out, &out
	err := c.run()
	return out.Bytes(), err
}

// kill kills the process and its group and waits until it is reaped.
func (c *child) kill() {
	c.mu.Lock()
	started := c.pid != 0
	c.mu.Unlock()
	if !started {
		return
	}
	c.killGroup()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		if c.t != nil {
			c.t.Errorf("process %d (%s) still not reaped 30 s after SIGKILL", c.pid, c.cmd.Path)
		}
	}
}
