package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The reads phase's readers run in processes of their own by default
// (`etcdbench scale-reader`), not beside the put clients whose latency the
// phase measures. A reader turns each page (a megabyte, for Concord and
// etcd alike) into garbage as fast as it reads, and in the put clients'
// process, whose live heap is a few megabytes, that set off a collection
// about every 50 ms: on this 2-core machine 211 collections in a 10 s
// window beside the reads against 31 without, 9.5% of the window marking
// and 0.2 s of it stopped for the world, every put in flight waiting
// (GODEBUG=gctrace=1 on the benchmark, 2026-12-05). That is the client
// timing itself, not the server: the writers a large read could stall are
// seldom in the reader's own process. In a process of its own the
// reader still takes its share of the machine's cores, as it should; its
// CPU time counts as the benchmark's own (config.helperPIDs).

// readerPassPrefix starts each line a reader process prints for a pass:
// "pass <microseconds> <pages>".
const readerPassPrefix = "pass "

// runScaleReader reads every key under readPrefix, pass after pass, from
// one system's server on one connection, and prints a line for each pass
// that read exactly --want keys, until SIGTERM or SIGINT. A pass that
// fails or reads another count ends it with an error.
func runScaleReader(args []string) error {
	fs := flag.NewFlagSet("scale-reader", flag.ContinueOnError)
	system := fs.String("system", "", "the server's system: concord or etcd")
	addr := fs.String("addr", "", "the server's client address (Concord: its NATS URL; etcd: its endpoint)")
	pageLimit := fs.Int("page-limit", 10_000, "limit of each page request")
	want := fs.Int("want", 0, "keys each pass must read")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case *system != "concord" && *system != "etcd":
		return fmt.Errorf("--system: %q, want concord or etcd", *system)
	case *addr == "":
		return errors.New("--addr: empty")
	case *pageLimit < 1 || *pageLimit > maxPageLimit:
		return fmt.Errorf("--page-limit: %d, want 1 to %d", *pageLimit, maxPageLimit)
	case *want < 1:
		return fmt.Errorf("--want: %d, want at least 1", *want)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// One connection (scaleConns).
	cfg := &scaleConfig{pageLimit: *pageLimit, clients: 1}
	var t scaleTarget = newConcordTarget(cfg, *addr)
	if *system == "etcd" {
		t = newEtcdTarget(cfg, *addr)
	}
	if err := t.open(); err != nil {
		return err
	}
	defer t.close()
	out := bufio.NewWriter(os.Stdout)
	for {
		t0 := time.Now()
		keys, pages, err := t.readPass(ctx, 0)
		d := time.Since(t0)
		if ctx.Err() != nil {
			return nil // stopped mid-pass: not a pass
		}
		if err != nil {
			return err
		}
		if keys != *want {
			return fmt.Errorf("a pass read %d keys under %s, want %d", keys, readPrefix, *want)
		}
		fmt.Fprintf(out, "%s%d %d\n", readerPassPrefix, d.Microseconds(), pages)
		if err := out.Flush(); err != nil {
			return fmt.Errorf("report a pass: %w", err)
		}
	}
}

// parsePassLine reads a reader process's line for one pass: its duration
// in milliseconds and its pages.
func parsePassLine(line string) (ms float64, pages int, err error) {
	rest, ok := strings.CutPrefix(line, readerPassPrefix)
	f := strings.Fields(rest)
	if !ok || len(f) != 2 {
		return 0, 0, fmt.Errorf("reader printed %q, want %q<microseconds> <pages>", line, readerPassPrefix)
	}
	us, err1 := strconv.ParseInt(f[0], 10, 64)
	pages, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || us < 0 || pages < 1 {
		return 0, 0, fmt.Errorf("reader printed %q, want %q<microseconds> <pages>", line, readerPassPrefix)
	}
	return float64(us) / 1000, pages, nil
}

// readerProc is a reader running in a process of its own.
type readerProc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer // what it said before it exited
	done   chan struct{}
	err    error // why its output stopped early, once done is closed
}

// startReaderProc starts this program as `scale-reader` against the
// system's server at addr; onPass is told each pass it reports, from one
// goroutine. The process is killed when ctx ends (and, should this
// program die first, by Pdeathsig).
func startReaderProc(ctx context.Context, system, addr string, pageLimit, want int, onPass func(ms float64, pages int)) (*readerProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("reader process: %w", err)
	}
	r := &readerProc{done: make(chan struct{})}
	r.cmd = exec.CommandContext(ctx, self, "scale-reader", "--system", system, "--addr", addr,
		"--page-limit", strconv.Itoa(pageLimit), "--want", strconv.Itoa(want))
	r.cmd.Stderr = &limitedWriter{w: &r.stderr, n: 4 << 10}
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("reader process: %w", err)
	}
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start reader process: %w", err)
	}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ms, pages, err := parsePassLine(sc.Text())
			if err != nil {
				r.err = err
				_ = r.cmd.Process.Kill()
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
			onPass(ms, pages)
		}
	}()
	return r, nil
}

// pid is the reader's process id.
func (r *readerProc) pid() int { return r.cmd.Process.Pid }

// wait waits for the reader to exit and returns why it did, unless it was
// stopped through the context it was started with.
func (r *readerProc) wait(ctx context.Context) error {
	<-r.done
	werr := r.cmd.Wait()
	switch {
	case r.err != nil:
		return r.err
	case ctx.Err() != nil:
		return nil
	case werr != nil:
		return fmt.Errorf("reader process: %w: %s", werr, strings.TrimSpace(r.stderr.String()))
	}
	return errors.New("reader process exited before it was stopped")
}

// limitedWriter keeps the first n bytes written to it and drops the rest.
// os/exec writes a child's stderr from one goroutine, and the reader's
// wait reads it only after cmd.Wait, so it needs no lock.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if k := min(len(p), l.n); k > 0 {
		l.n -= k
		if _, err := l.w.Write(p[:k]); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
