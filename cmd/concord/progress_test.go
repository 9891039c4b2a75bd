package main

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/concord-io/concord/service"
)

// lockedBuffer is a buffer written by the bar's goroutine and read by the
// test's.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A start-up step that lasts draws a bar with its name and progress; the
// watch ends once the node has started and no step runs; a step that
// ends within a second draws nothing.
func TestWatchStartup(t *testing.T) {
	out := &lockedBuffer{}
	progressOut = out
	t.Cleanup(func() { progressOut = os.Stderr })

	var step atomic.Value // string
	step.Store("quick")
	var done atomic.Int64
	progressOf := func() service.StartupProgress {
		s := step.Load().(string)
		switch s {
		case "quick":
			return service.StartupProgress{Step: "a quick step", Total: 10, Done: 5}
		case "long":
			return service.StartupProgress{Step: "restoring snapshot", Done: done.Add(1 << 20), Total: 1 << 30, Bytes: true}
		}
		return service.StartupProgress{}
	}
	started := make(chan struct{})
	ended := make(chan struct{})
	go func() { watchStartup(progressOf, started); close(ended) }()

	time.Sleep(300 * time.Millisecond) // under the second a step must last
	step.Store("long")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "restoring snapshot") {
		if time.Now().After(deadline) {
			t.Fatalf("no bar for a long step after 20 s; drawn: %q", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	step.Store("")
	close(started)
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the watch did not end once the node started and no step ran")
	}
	got := out.String()
	if strings.Contains(got, "a quick step") {
		t.Errorf("a step of 0.3 s drew a bar: %q", got)
	}
	if !strings.Contains(got, "MB") || !strings.Contains(got, "%") {
		t.Errorf("the snapshot's bar shows no bytes or share done: %q", got)
	}
}

// A log line written while a bar is drawn starts on a clean line: the
// bar is cleared first, and drawn again after it by its next update.
func TestLogLineClearsTheBar(t *testing.T) {
	out := &lockedBuffer{}
	progressOut = out
	t.Cleanup(func() { progressOut = os.Stderr })
	log := logWriter{out}

	p := newProgress(true, "replaying log", 100, unitCount)
	p.Set(40)
	before := out.String()
	if !strings.Contains(before, "replaying log") {
		t.Fatalf("no bar drawn: %q", before)
	}
	if _, err := log.Write([]byte("level=INFO msg=hello\n")); err != nil {
		t.Fatal(err)
	}
	got := strings.TrimPrefix(out.String(), before)
	cleared, line, ok := strings.Cut(got, "level=INFO msg=hello\n")
	if !ok || !strings.HasSuffix(cleared, "\r") || strings.Contains(cleared, "replaying log") {
		t.Fatalf("the log line was not written on a cleared line: %q", got)
	}
	if line != "" {
		t.Fatalf("something was drawn between the clear and the line: %q", got)
	}
	time.Sleep(150 * time.Millisecond) // past the bar's throttle
	p.Set(60)
	if after := out.String(); !strings.Contains(after[len(before):], "replaying log") {
		t.Fatalf("the bar was not drawn again after the line: %q", after)
	}
	p.Finish()
	out.mu.Lock()
	out.b.Reset()
	out.mu.Unlock()
	if _, err := log.Write([]byte("after\n")); err != nil || out.String() != "after\n" {
		t.Fatalf("with no bar, a log line is written as it is: %q, %v", out.String(), err)
	}
}
