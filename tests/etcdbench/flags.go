package main

import (
	"flag"
	"fmt"
	"time"
)

// roundFlags are the flags of the commands that time rounds of
// closed-loop clients: etcdbench itself and etcdbench history.
type roundFlags struct {
	clients    int
	duration   time.Duration
	warmup     time.Duration
	rounds     int
	valueBytes int
}

// add registers the flags on fs; what a window and a round are, and how
// many rounds a run has by default, differ by command.
func (r *roundFlags) add(fs *flag.FlagSet, durationHelp string, rounds int, roundsHelp string) {
	fs.IntVar(&r.clients, "clients", 32, "concurrent clients, each on its own connection with one request in flight")
	fs.DurationVar(&r.duration, "duration", 10*time.Second, durationHelp)
	fs.DurationVar(&r.warmup, "warmup", time.Second, "load before each window that is not counted")
	fs.IntVar(&r.rounds, "rounds", rounds, roundsHelp)
	fs.IntVar(&r.valueBytes, "value-bytes", 64, "size of each value written (a JSON string, quotes included)")
}

// check refuses values no run can use.
func (r *roundFlags) check() error {
	switch {
	case r.clients < 1:
		return fmt.Errorf("--clients: %d, want at least 1", r.clients)
	case r.duration <= 0:
		return fmt.Errorf("--duration: %s, want more than 0", r.duration)
	case r.warmup < 0:
		return fmt.Errorf("--warmup: %s, want 0 or more", r.warmup)
	case r.rounds < 1:
		return fmt.Errorf("--rounds: %d, want at least 1", r.rounds)
	case r.valueBytes < 2:
		return fmt.Errorf("--value-bytes: %d, want at least 2 (a JSON string)", r.valueBytes)
	}
	return nil
}
