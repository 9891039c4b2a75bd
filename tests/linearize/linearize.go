// Package linearize records histories of register operations against
// Concord and checks them for linearizability with porcupine, the checker
// etcd's robustness suite uses. A write whose outcome the client could not
// learn is recorded as unknown: it may take effect at any moment after its
// call, or never, which is what a register may assume of it. A write the
// server refused as "nothing changed" is left out of the history, so that
// if it was applied after all, a read that sees it makes the history
// illegal.
package linearize

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op names an operation on one register key.
type Op string

// The operations: a put, a read, and a compare-and-swap (a transaction
// whose compare is the key's value).
const (
	Put Op = "put"
	Get Op = "get"
	CAS Op = "cas"
)

// Input is an operation as called.
type Input struct {
	Op        Op
	Key       string
	Value     string // put's value, and cas's new value
	Expect    string // cas's expected value; "" for an absent key
	ClientTag string // who called it, for the report
}

// Output is an operation's result. Value is "" for an absent key.
type Output struct {
	Value   string // what a get read
	Swapped bool   // a cas that swapped
	Unknown bool   // a write whose outcome the caller could not learn
}

// Model is the sequential specification: independent registers, so the
// check partitions the history by key.
var Model = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(string), input.(Input), output.(Output)
		switch in.Op {
		case Put:
			return true, in.Value
		case Get:
			return out.Value == st, st
		case CAS:
			if out.Unknown {
				// It swapped if the value matched when it took effect.
				if st == in.Expect {
					return true, in.Value
				}
				return true, st
			}
			if st == in.Expect {
				return out.Swapped, in.Value
			}
			return !out.Swapped, st
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		suffix := ""
		if out.Unknown {
			suffix = " (outcome unknown)"
		}
		switch in.Op {
		case Put:
			return fmt.Sprintf("%s put(%s,%s)%s", in.ClientTag, in.Key, in.Value, suffix)
		case Get:
			return fmt.Sprintf("%s get(%s)->%q", in.ClientTag, in.Key, out.Value)
		}
		return fmt.Sprintf("%s cas(%s,%q->%q)->%v%s", in.ClientTag, in.Key, in.Expect, in.Value, out.Swapped, suffix)
	},
}

// History is a concurrent recorder of operations.
type History struct {
	start time.Time

	mu      sync.Mutex
	ops     []porcupine.Operation
	refused map[string]string // value -> the refusal, for writes that changed nothing
	unknown int
}

// New starts an empty history; its clock starts now.
func New() *History {
	return &History{start: time.Now(), refused: map[string]string{}}
}

// Now is the history's clock, for an operation's call time.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Add records an operation that returned now. An unknown write is
// recorded as never returning.
func (h *History) Add(client int, in Input, call int64, out Output) {
	ret := h.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if out.Unknown {
		h.unknown++
	}
	h.ops = append(h.ops, opOf(client, in, call, ret, out))
}

// Refused records a write the server said changed nothing, under why; it
// stays out of the history. Values must be unique for Refused to mean
// anything: AppliedRefusals looks them up.
func (h *History) Refused(in Input, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refused[in.Value] = why
}

// Counts returns the operations recorded, of which unknown, and the writes
// refused.
func (h *History) Counts() (ops, unknown, refused int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops), h.unknown, len(h.refused)
}

// AppliedRefusals returns, for each value in applied that a refused write
// carried, the refusal: writes answered "nothing changed" that were
// applied after all.
func (h *History) AppliedRefusals(applied []string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, v := range applied {
		if why, ok := h.refused[v]; ok {
			out = append(out, fmt.Sprintf("%s (answered: %s)", v, why))
		}
	}
	return out
}

// Check checks the history for linearizability within timeout and
// returns nil, or an error that describes the verdict. When it is illegal
// and vizPath is not "", porcupine's visualization (an HTML page) is
// written there.
func (h *History) Check(timeout time.Duration, vizPath string) error {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		err := fmt.Errorf("the history of %d operations is not linearizable", len(ops))
		if vizPath != "" {
			if verr := porcupine.VisualizePath(Model, info, vizPath); verr == nil {
				err = fmt.Errorf("%w; see %s", err, vizPath)
			}
		}
		return err
	default:
		return fmt.Errorf("the linearizability check of %d operations was inconclusive within %s", len(ops), timeout)
	}
}

// opOf builds a recorded operation as Add would, at given times.
func opOf(client int, in Input, call, ret int64, out Output) porcupine.Operation {
	if out.Unknown {
		ret = math.MaxInt64
	}
	return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
}
