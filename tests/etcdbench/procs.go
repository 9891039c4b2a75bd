package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a server has to exit after SIGTERM before it is
// killed.
const stopGrace = 10 * time.Second

// proc is one server process started by the benchmark: a Concord node, an
// etcd member or the echo responder. Its output goes to a log file, and
// stop ends it whatever state it is in.
type proc struct {
	name    string // "concord n1", "etcd m2", "echo"
	logPath string
	cmd     *exec.Cmd
	log     *os.File
	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // how it exited, once done is closed
	stopped bool          // stop was called: an exit is expected
	stopMu  sync.Mutex
}

// startProc starts path with args, its stdout and stderr in logPath. The
// process gets a process group of its own, so a Ctrl-C at the terminal
// reaches only the benchmark, which then stops its servers in order; and
// Pdeathsig kills it should the benchmark itself be killed outright.
func startProc(name, logPath, path string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, log: f, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	logf("started %s (pid %d)", name, cmd.Process.Pid)
	return p, nil
}

// pid is the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited returns an error if the process has exited, saying how, with the
// end of its log.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) exited: %v\n%s", p.name, p.pid(), p.waitErr, p.tail(20))
	default:
		return nil
	}
}

// stop sends SIGTERM, waits up to stopGrace, then kills the process. It
// returns an error if the process had exited before it was asked to.
func (p *proc) stop() error {
	p.stopMu.Lock()
	defer p.stopMu.Unlock()
	if p.stopped {
		return nil
	}
	early := p.exited()
	p.stopped = true
	if early != nil {
		return early
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		logf("%s (pid %d) did not exit %s after SIGTERM; killing it", p.name, p.pid(), stopGrace)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return nil
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(log %s: %v)", p.logPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last lines of %s:\n%s", p.logPath, strings.Join(lines, "\n"))
}

// stopAll stops every process, all at once, and joins their early-exit
// errors.
func stopAll(procs []*proc) error {
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.stop()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// clockTick is the kernel's USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat: 100 on every Linux architecture Go builds for, but
// asked of getconf where it answers.
var clockTick = func() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && v > 0 {
			return float64(v)
		}
	}
	return 100
}()

// procCPU returns the user plus system CPU time the process pid has used,
// all its threads together (utime and stime of /proc/<pid>/stat).
func procCPU(pid string) (time.Duration, error) {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu time of %s: %w", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// fields are counted from the last ')'. utime and stime are fields 14
	// and 15, so the 12th and 13th after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu time of %s: no ')' in %q", pid, data)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time of %s: %d fields after the name", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("cpu time of %s: %w", pid, err)
	}
	return ticks(float64(ut + st)), nil
}

func ticks(n float64) time.Duration { return time.Duration(n / clockTick * float64(time.Second)) }

// machineCPU returns the CPU time every process on the machine has used,
// busy time only (the first line of /proc/stat less idle and iowait).
func machineCPU() (time.Duration, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, fmt.Errorf("/proc/stat: empty")
	}
	fields := strings.Fields(sc.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q", sc.Text())
	}
	// user nice system idle iowait irq softirq steal; guest time is
	// already counted in user.
	var busy float64
	for k, s := range fields[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if k == 3 || k == 4 {
			continue
		}
		busy += float64(v)
	}
	return ticks(busy), nil
}

// ports hands out free loopback ports, never the same one twice in a run:
// a cluster asks for several before any server binds them.
type ports struct {
	mu   sync.Mutex
	used map[int]bool
}

func (p *ports) next() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used == nil {
		p.used = map[int]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !p.used[port] {
			p.used[port] = true
			return port, nil
		}
	}
	return 0, errors.New("free port: the kernel kept handing out ports already used")
}

// addr returns a free loopback host:port.
func (p *ports) addr() (string, error) {
	port, err := p.next()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}
