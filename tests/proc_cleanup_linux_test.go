package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests check that the tests' processes never outlive them: see
// proc_test.go and leftovers.sh.

// alive reports whether pid is a live process (not a zombie) started with
// the environment variable name in its environment.
func alive(pid int, name string) bool {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return err == nil && strings.Contains("\x00"+string(env), "\x00"+name+"=")
}

// waitGone waits until pid, started with marker name, is no longer alive.
func waitGone(t *testing.T, what string, pid int, name string) {
	t.Helper()
	checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if alive(pid, name) {
			return fmt.Errorf("%s (pid %d) is still alive", what, pid)
		}
		return nil
	})
}

// waitExec waits until pid runs the command line args (an exec after a
// fork takes a moment).
func waitExec(t *testing.T, pid int, args ...string) {
	t.Helper()
	want := strings.Join(args, "\x00") + "\x00"
	checkFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || string(b) != want {
			return fmt.Errorf("pid %d runs %q (%v), want %q", pid, b, err, want)
		}
		return nil
	})
}

// pidsIn waits until out holds n lines "<word> <pid>" and returns the pids
// by word.
func pidsIn(t *testing.T, out *lockedBuffer, words ...string) map[string]int {
	t.Helper()
	pids := map[string]int{}
	checkFor(t, 20*time.Second, 10*time.Millisecond, func() error {
		for _, line := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				if pid, err := strconv.Atoi(f[1]); err == nil {
					pids[f[0]] = pid
				}
			}
		}
		for _, w := range words {
			if pids[w] == 0 {
				return fmt.Errorf("no %q pid in %q", w, out.String())
			}
		}
		return nil
	})
	return pids
}

// At its deadline a process is killed with its whole group, and the caller
// learns it was the deadline; never before it.
func TestProcDeadlineKillsTheGroup(t *testing.T) {
	const timeout = 500 * time.Millisecond
	p := newProc(t, timeout, "sh", "-c", `sleep 300 & echo child $!; sleep 300`)
	var out lockedBuffer
	p.cmd.Stdout = &out
	start := time.Now()
	err := p.run()
	took := time.Since(start)
	if err == nil || !p.timedOut() || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("run: %v, timed out %v", err, p.timedOut())
	}
	if took < timeout || took > 20*time.Second {
		t.Fatalf("killed after %s, want %s (late by at most 20 s)", took, timeout)
	}
	child := pidsIn(t, &out, "child")["child"]
	waitGone(t, "the shell's background sleep", child, p.marker)
}

// When a test ends, its processes are killed, and so is every descendant
// that left their process group.
func TestProcCleanupKillsEscapedDescendants(t *testing.T) {
	var leader, escaped int
	var marker string
	t.Run("starts and leaves", func(t *testing.T) {
		p := newProc(t, 0, "sh", "-c", `setsid sleep 300 </dev/null >/dev/null 2>&1 & echo escaped $!; exec sleep 300`)
		var out lockedBuffer
		p.cmd.Stdout = &out
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		leader, escaped, marker = p.cmd.Process.Pid, pidsIn(t, &out, "escaped")["escaped"], p.marker
		checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if pgid, err := syscall.Getpgid(escaped); err != nil || pgid == leader {
				return fmt.Errorf("pid %d: process group %d (%v), want one of its own", escaped, pgid, err)
			}
			return nil
		})
	})
	if leader == 0 || escaped == 0 {
		t.Fatal("the subtest did not start its processes")
	}
	waitGone(t, "the test's process", leader, marker)
	waitGone(t, "the descendant that left the group", escaped, marker)
}

// A child is not killed when the thread that started it goes away: a
// goroutine locked to its thread that exits ends the thread, and a
// Pdeathsig child forked from that thread would get SIGKILL then.
func TestProcOutlivesTheCallersThread(t *testing.T) {
	type started struct {
		p   *proc
		tid int
		err error
	}
	// Two goroutines locked to their threads at once hold two threads,
	// so at least one of them is not the main thread (which never ends
	// and would prove nothing); that one starts the child. Hoping the
	// scheduler avoids the main thread was not enough: on a busy
	// machine it picked the main thread eleven times in a row.
	type locked struct {
		tid int
		use chan bool
	}
	lockedCh, startedCh := make(chan locked, 2), make(chan started, 1)
	for i := 0; i < 2; i++ {
		go func() {
			runtime.LockOSThread() // unlocked only if not chosen: a chosen thread ends with this goroutine
			l := locked{tid: syscall.Gettid(), use: make(chan bool, 1)}
			lockedCh <- l
			if !<-l.use {
				runtime.UnlockOSThread()
				return
			}
			p := newProc(t, 0, "sleep", "300")
			startedCh <- started{p: p, tid: l.tid, err: p.start()}
		}()
	}
	a, b := <-lockedCh, <-lockedCh
	if a.tid == b.tid {
		t.Fatalf("two goroutines locked to one thread %d", a.tid)
	}
	if a.tid == os.Getpid() {
		a, b = b, a
	}
	a.use <- true
	b.use <- false
	s := <-startedCh
	if s.err != nil {
		t.Fatalf("start: %v", s.err)
	}
	checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", s.tid)); err == nil {
			return fmt.Errorf("thread %d still exists", s.tid)
		}
		return nil
	})
	for i := 0; i < 20; i++ { // a SIGKILL would land within milliseconds
		if !alive(s.p.cmd.Process.Pid, s.p.marker) {
			t.Fatalf("the child died when the thread of the goroutine that started it ended: %v", s.p.wait())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// TestProcHelper is the child test binary of the tests below; it does
// nothing in a normal run.
func TestProcHelper(t *testing.T) {
	switch os.Getenv(procHelperVar) {
	case "":
		t.Skip("a helper for TestProcChildrenDieWithTheTestBinary and TestProcEscapeFailsTheBinary")
	case "spawn":
		// A shell (a direct child) with a sleep of its own (a grandchild
		// in the shell's group); then wait to be killed.
		p := newProc(t, 0, "sh", "-c", `sleep 300 & echo grandchild $!; wait`)
		p.cmd.Stdout = os.Stdout
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("child %d\n", p.cmd.Process.Pid)
		p.wait()
	case "escape":
		// A process with one of this binary's markers that no Cleanup
		// knows of: what a bug in the harness would leave.
		cmd := exec.Command("sh", "-c", `setsid sleep 300 </dev/null >/dev/null 2>&1 & echo escaped $!`)
		cmd.Env = append(os.Environ(), procMarkerPrefix+"0=TestProcHelper")
		var out lockedBuffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		waitExec(t, pidsIn(t, &out, "escaped")["escaped"], "sleep", "300")
		fmt.Print(out.String())
	}
}

// startHelper runs TestProcHelper in a child test binary and returns it
// with the pids it reports.
func startHelper(t *testing.T, mode string, words ...string) (*proc, *lockedBuffer, *lockedBuffer, map[string]int) {
	t.Helper()
	p := newProc(t, time.Minute, os.Args[0], "-test.run=^TestProcHelper$")
	p.cmd.Env = append(p.cmd.Env, procHelperVar+"="+mode)
	var stdout, stderr lockedBuffer
	p.cmd.Stdout, p.cmd.Stderr = &stdout, &stderr
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	return p, &stdout, &stderr, pidsIn(t, &stdout, words...)
}

// The test binary's children die with it: killed (SIGKILL, as the go
// command does to a binary past its timeout), its direct children get
// their Pdeathsig; interrupted (SIGINT, SIGTERM), TestMain kills them and
// their descendants and exits 1, even though its tests then pass.
func TestProcChildrenDieWithTheTestBinary(t *testing.T) {
	t.Run("SIGKILL", func(t *testing.T) {
		p, _, _, pids := startHelper(t, "spawn", "child", "grandchild")
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		// The helper's children carry this test's marker for the helper.
		waitGone(t, "the killed binary's child", pids["child"], p.marker)
		// Its grandchild is in the child's group, which nothing signals
		// now: this test's Cleanup kills it, and for a real run the check
		// at the end of make test would.
	})
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			if signal.Ignored(sig) {
				// Inherited by the child too, which then ignores it.
				t.Skipf("%v is ignored in this process (a background job's SIGINT)", sig)
			}
			p, _, stderr, pids := startHelper(t, "spawn", "child", "grandchild")
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			var ee *exec.ExitError
			if err := p.wait(); !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "killed every process") {
				t.Fatalf("binary after %v: %v, stderr %q", sig, err, stderr.String())
			}
			waitGone(t, "the child", pids["child"], p.marker)
			waitGone(t, "the grandchild", pids["grandchild"], p.marker)
		})
	}
}

// A process that outlives the test binary's tests fails the binary, which
// names and kills it.
func TestProcEscapeFailsTheBinary(t *testing.T) {
	p, stdout, stderr, pids := startHelper(t, "escape", "escaped")
	var ee *exec.ExitError
	if err := p.wait(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("helper binary: %v, want exit 1\nstdout %q\nstderr %q", err, stdout.String(), stderr.String())
	}
	want := fmt.Sprintf("a process outlived its test (killed now): pid %d (sleep 300), started by TestProcHelper", pids["escaped"])
	if !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr %q lacks %q", stderr.String(), want)
	}
	waitGone(t, "the escaped process", pids["escaped"], p.marker)
}

// leftovers.sh, which make test runs at its end, finds a process of the
// run that escaped, names it, kills it and fails; with none left it
// passes.
func TestLeftoversCheckFails(t *testing.T) {
	run := fmt.Sprintf("leftovers-selftest-%d-%d", os.Getpid(), time.Now().UnixNano())
	check := func() (string, int) {
		out, err := newProc(t, time.Minute, "bash", "leftovers.sh", run).combinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Exited() {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatalf("leftovers.sh: %v\n%s", err, out)
		}
		return string(out), 0
	}
	if out, code := check(); code != 0 {
		t.Fatalf("leftovers.sh with nothing left: exit %d\n%s", code, out)
	}
	esc := newProc(t, 0, "sh", "-c", `setsid sleep 300 </dev/null >/dev/null 2>&1 & echo escaped $!`)
	esc.cmd.Env = append(esc.cmd.Env, runMarkerVar+"="+run)
	var escOut lockedBuffer
	esc.cmd.Stdout = &escOut
	if err := esc.run(); err != nil {
		t.Fatal(err)
	}
	pid := pidsIn(t, &escOut, "escaped")["escaped"]
	waitExec(t, pid, "sleep", "300")
	out, code := check()
	want := fmt.Sprintf("pid %d: sleep 300 (started by %s)", pid, t.Name())
	if code != 1 || !strings.Contains(out, "FAIL") || !strings.Contains(out, want) {
		t.Fatalf("leftovers.sh with pid %d left: exit %d, want 1 and %q\n%s", pid, code, want, out)
	}
	t.Logf("leftovers.sh:\n%s", out)
	waitGone(t, "the escaped process", pid, esc.marker)
	if out, code := check(); code != 0 {
		t.Fatalf("leftovers.sh after it killed the process: exit %d\n%s", code, out)
	}
}
