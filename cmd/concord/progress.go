package main

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/concord-io/concord/service"
)

// A progress bar for long work (a backup, a restore, a start-up that
// restores a large snapshot, a benchmark), drawn on stderr and only when
// both stdout and stderr are terminals: what a script reads, piped or
// redirected, and --json output stay exactly as they were. A nil
// *progress draws nothing, so callers need not check.
type progress struct {
	bar  *progressbar.ProgressBar
	stop chan struct{}
	done sync.WaitGroup
}

// progressOut is where bars are drawn (a test draws elsewhere).
var progressOut io.Writer = os.Stderr

// drawn is the bar on the terminal now, if any; its lock is held while a
// bar draws and while a log line is written, so that a log line clears
// the bar first instead of landing in the middle of it (the next update
// draws the bar again below the line).
var drawn struct {
	sync.Mutex
	bar *progressbar.ProgressBar
}

// logWriter writes log lines to w, clearing the bar drawn, if any, first.
type logWriter struct{ w io.Writer }

func (lw logWriter) Write(b []byte) (int, error) {
	drawn.Lock()
	defer drawn.Unlock()
	if drawn.bar != nil {
		_ = drawn.bar.Clear()
	}
	return lw.w.Write(b)
}

// draw runs f, which draws bar, under the terminal's lock, and records
// bar as the one drawn.
func draw(bar *progressbar.ProgressBar, f func() error) {
	drawn.Lock()
	defer drawn.Unlock()
	drawn.bar = bar
	_ = f()
}

// progressOnTerminal reports whether progress may be drawn: stdout and
// stderr are terminals, and the output is not JSON.
func progressOnTerminal(jsonOut bool) bool {
	return !jsonOut && term.IsTerminal(int(os.Stdout.Fd())) && term.IsTerminal(int(os.Stderr.Fd()))
}

// progressUnit is what a bar counts.
type progressUnit int

const (
	unitBytes progressUnit = iota
	unitCount              // things: log entries
	unitTime               // milliseconds, shown as the time elapsed and left
)

// newProgress starts a bar for what, of total units (-1 for a spinner of
// unknown length), or returns nil when show is false.
func newProgress(show bool, what string, total int64, unit progressUnit) *progress {
	if !show {
		return nil
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(progressOut),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetPredictTime(total > 0),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSpinnerType(14),
	}
	switch unit {
	case unitBytes:
		opts = append(opts, progressbar.OptionShowBytes(true))
	case unitCount:
		opts = append(opts, progressbar.OptionShowCount())
	}
	return &progress{bar: progressbar.NewOptions64(total, opts...)}
}

// newTimedProgress starts a bar that fills over d (a workload that runs
// for a set time), or, for d <= 0, a spinner that turns until Finish; nil
// when show is false.
func newTimedProgress(show bool, what string, d time.Duration) *progress {
	total := int64(-1)
	if d > 0 {
		total = d.Milliseconds()
	}
	p := newProgress(show, what, total, unitTime)
	if p == nil {
		return nil
	}
	p.stop = make(chan struct{})
	start := time.Now()
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				if total > 0 {
					p.Set(min(time.Since(start).Milliseconds(), total))
				} else {
					p.Add(1) // turns the spinner
				}
			}
		}
	}()
	return p
}

// Add counts n more units done.
func (p *progress) Add(n int64) {
	if p != nil {
		draw(p.bar, func() error { return p.bar.Add64(n) })
	}
}

// Set says how many units are done.
func (p *progress) Set(n int64) {
	if p != nil {
		draw(p.bar, func() error { return p.bar.Set64(n) })
	}
}

// Finish clears the bar from the terminal, so that what is printed next
// starts on a clean line.
func (p *progress) Finish() {
	if p == nil {
		return
	}
	if p.stop != nil {
		close(p.stop)
		p.done.Wait()
	}
	drawn.Lock()
	defer drawn.Unlock()
	_ = p.bar.Finish()
	_ = p.bar.Clear()
	if drawn.bar == p.bar {
		drawn.bar = nil
	}
}

// progressWriter counts what passes through it on a bar set later (once
// the total is known); until then it only writes.
type progressWriter struct {
	w io.Writer
	p *progress
}

func (pw *progressWriter) Write(b []byte) (int, error) {
	n, err := pw.w.Write(b)
	pw.p.Add(int64(n))
	return n, err
}

// passProgress draws one bar per pass of a restore
// (backupfile.Progress), named after the file.
type passProgress struct {
	show bool
	file string
	cur  *progress
}

func (pp *passProgress) Begin(pass string, total int64) {
	pp.cur = newProgress(pp.show, pass+" "+pp.file, total, unitBytes)
}
func (pp *passProgress) Add(n int64) { pp.cur.Add(n) }
func (pp *passProgress) End()        { pp.cur.Finish(); pp.cur = nil }

// watchStartup draws the node's start-up's long steps (restoring its
// snapshot, replaying its log) as bars, once a step has lasted a second
// (a quick start shows nothing), until the node has started (started
// closes) and no such step runs.
func watchStartup(progressOf func() service.StartupProgress, started <-chan struct{}) {
	var step string
	var since time.Time
	var p *progress
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for range t.C {
		cur := progressOf()
		if cur.Step != step {
			p.Finish()
			p, step, since = nil, cur.Step, time.Now()
		}
		if cur.Step == "" {
			select {
			case <-started:
				return
			default:
				continue
			}
		}
		if p == nil && time.Since(since) >= time.Second {
			unit := unitBytes
			if !cur.Bytes {
				unit = unitCount
			}
			p = newProgress(true, cur.Step, cur.Total, unit)
		}
		p.Set(cur.Done)
	}
}
