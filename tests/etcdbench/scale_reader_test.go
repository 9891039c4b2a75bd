package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// TestMain lets the test binary stand in for etcdbench when a test starts
// a reader process: startReaderProc runs os.Executable() scale-reader.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "scale-reader" {
		if err := runScaleReader(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "scale-reader:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if concordBin != "" {
		os.RemoveAll(filepath.Dir(concordBin))
	}
	os.Exit(code)
}

func TestParsePassLine(t *testing.T) {
	ms, pages, err := parsePassLine("pass 345678 11")
	if err != nil || ms != 345.678 || pages != 11 {
		t.Errorf("parsePassLine(pass 345678 11) = %v, %d, %v; want 345.678, 11, nil", ms, pages, err)
	}
	for _, line := range []string{"", "pass", "pass 1", "pass 1 2 3", "pas 1 2", "pass x 2", "pass 1 x", "pass -1 2", "pass 1 0", "error: boom"} {
		if _, _, err := parsePassLine(line); err == nil {
			t.Errorf("parsePassLine(%q): no error", line)
		}
	}
}

func TestScaleReaderRefusesBadFlags(t *testing.T) {
	ok := []string{"--system", "concord", "--addr", "nats://127.0.0.1:1", "--want", "1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", "x", "--want", "1"}, "--system"},
		{[]string{"--system", "mysql", "--addr", "x", "--want", "1"}, "--system"},
		{[]string{"--system", "etcd", "--want", "1"}, "--addr"},
		{append(ok[:len(ok):len(ok)], "--page-limit", "0"), "--page-limit"},
		{append(ok[:len(ok):len(ok)], "--page-limit", strconv.Itoa(maxPageLimit+1)), "--page-limit"},
		{[]string{"--system", "concord", "--addr", "x", "--want", "0"}, "--want"},
		{append(ok[:len(ok):len(ok)], "extra"), "unexpected arguments"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
	} {
		err := runScaleReader(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("runScaleReader(%q) = %v, want an error naming %s", c.args, err, c.want)
		}
	}
}

// A helper process's CPU time counts as this program's.
func TestSampleAtCountsHelpers(t *testing.T) {
	self := os.Getpid()
	start := time.Now()
	for time.Since(start) < 100*time.Millisecond {
	}
	alone, err := sampleAt(context.Background(), time.Now(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	twice, err := sampleAt(context.Background(), time.Now(), nil, []int{self})
	if err != nil {
		t.Fatal(err)
	}
	// This process counted twice: at least what it counted once, again.
	if twice.self < 2*alone.self-2*ticks(1) {
		t.Errorf("with itself as a helper, this process counts %s, want about twice %s", twice.self, alone.self)
	}
	if _, err := sampleAt(context.Background(), time.Now(), nil, []int{0}); err == nil {
		t.Error("a helper whose CPU time cannot be read: no error")
	}
}

var (
	concordOnce sync.Once
	concordBin  string
	concordErr  error
)

// buildConcord returns the concord binary for the tests that need a real
// server: the one CONCORD_TEST_BINARY names (make test's black-box tests
// build it before they run these), or one built here once.
func buildConcord(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CONCORD_TEST_BINARY"); p != "" {
		return p
	}
	concordOnce.Do(func() {
		dir, err := os.MkdirTemp("", "etcdbench-concord-")
		if err != nil {
			concordErr = err
			return
		}
		concordBin = filepath.Join(dir, "concord")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", concordBin, "./cmd/concord")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			concordErr = fmt.Errorf("build concord: %w\n%s", err, out)
		}
	})
	if concordErr != nil {
		t.Fatal(concordErr)
	}
	return concordBin
}

// A reader process reads the prefix pass after pass from a real Concord
// node, reports each pass with its pages, stops when its context ends, and
// fails, saying why, on a pass that reads another count than it was told.
func TestReaderProcAgainstConcord(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Concord node")
	}
	bin := buildConcord(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := startConcord(ctx, &config{concord: bin}, &ports{}, t.TempDir(), 1)
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("stop concord: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	const keys, pageLimit = 25, 10
	tgt := newConcordTarget(&scaleConfig{clients: 1, valueBytes: 10}, s.urls[0])
	if err := tgt.open(); err != nil {
		t.Fatal(err)
	}
	defer tgt.close()
	for i := range keys {
		if err := tgt.put(ctx, 0, scaleKey(i, keys)); err != nil {
			t.Fatal(err)
		}
	}
	// A key outside the prefix that sorts right after it is not read.
	names, _ := subjects.New(subjects.DefaultPrefix)
	var p schema.KVPutReply
	if err := call(ctx, tgt.conn(0), names.Request(subjects.KVPut), schema.KVPutRequest{Key: "scale.1.x", Value: []byte(`1`)}, &p); err != nil {
		t.Fatal(err)
	}

	rctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	var pages []int
	rp, err := startReaderProc(rctx, "concord", s.urls[0], pageLimit, keys, func(ms float64, pp int) {
		mu.Lock()
		defer mu.Unlock()
		if ms <= 0 {
			t.Errorf("a pass of %v ms", ms)
		}
		pages = append(pages, pp)
	})
	if err != nil {
		t.Fatal(err)
	}
	checkSoon(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(pages) >= 3
	})
	stop()
	if err := rp.wait(rctx); err != nil {
		t.Errorf("a reader stopped through its context: %v", err)
	}
	if err := rp.cmd.Process.Signal(syscall.Signal(0)); err == nil {
		t.Error("the reader process still runs after wait")
	}
	mu.Lock()
	for _, pp := range pages {
		if pp != 3 { // 25 keys in pages of 10
			t.Errorf("a pass of %d pages, want 3", pp)
		}
	}
	mu.Unlock()

	// Told to expect one key more, the first pass fails the reader.
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	rp, err = startReaderProc(wctx, "concord", s.urls[0], pageLimit, keys+1, func(float64, int) {
		t.Error("a pass that read the wrong count was reported")
	})
	if err != nil {
		t.Fatal(err)
	}
	err = rp.wait(wctx)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("read %d keys under %s, want %d", keys, readPrefix, keys+1)) {
		t.Errorf("a reader told to expect %d keys: %v, want the count it read", keys+1, err)
	}

	// A server that is not there fails the reader too.
	rp, err = startReaderProc(ctx, "concord", "nats://127.0.0.1:1", pageLimit, keys, func(float64, int) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := rp.wait(ctx); err == nil || !strings.Contains(err.Error(), "connect") {
		t.Errorf("a reader with no server: %v, want a connect error", err)
	}
}

// checkSoon polls cond until it holds or timeout passes.
func checkSoon(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not so after %s", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
