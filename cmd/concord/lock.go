package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// lockHolder returns the key of the session that holds the lock name:
// the first in its queue (the lowest create revision), nil when none.
func lockHolder(ctx context.Context, c *client.Client, name string) (*schema.KeyValue, error) {
	pfx := name + "."
	r, err := c.Get(ctx, schema.KVGetRequest{Prefix: &pfx})
	if err != nil {
		return nil, err
	}
	var first *schema.KeyValue
	for i := range r.KVs {
		if first == nil || r.KVs[i].CreateRevision < first.CreateRevision {
			first = &r.KVs[i]
		}
	}
	return first, nil
}

// fencingTokenEnv is the variable that carries the fencing token to CMD.
const fencingTokenEnv = "CONCORD_FENCING_TOKEN"

func runLock(args []string) error {
	fs, cf := newFlags("lock", "lock NAME [--ttl 10s] [--grace 3s] -- CMD ARGS...")
	ttl := seconds{n: 10}
	fs.Var(&ttl, "ttl", "the session's lease ttl: how long the lock outlives this process if it dies")
	grace := fs.Duration("grace", 3*time.Second, "after the session is lost, how long CMD has between SIGTERM and SIGKILL")
	pos, cmdArgs, dashdash, err := parse(fs, args)
	if err != nil {
		var u usageError
		if errors.As(err, &u) && !slices.Contains(args, "--") {
			// The command's own flags (sh -c) read as lock's.
			return usagef("%v: put the command after \"--\": concord lock NAME -- CMD ARGS...", err)
		}
		return err
	}
	switch {
	case len(pos) == 0:
		return usagef("missing NAME")
	case len(pos) > 1 || !dashdash:
		return usagef("put the command after \"--\": concord lock NAME -- CMD ARGS...")
	case len(cmdArgs) == 0:
		return usagef("missing CMD after \"--\"")
	case ttl.n < 1:
		return usagef("--ttl: at least 1s")
	}
	name := pos[0]
	if err := checkQueueName("lock", name); err != nil {
		return err
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	c, err := cf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := cf.callCtx()
	s, err := c.NewSession(ctx, time.Duration(ttl.n)*time.Second)
	cancel()
	if err != nil {
		return err
	}
	closeSession := func() {
		ctx, cancel := cf.callCtx()
		defer cancel()
		if err := s.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "concord lock: revoke lease %d: %v (it expires within %ds)\n", s.Lease(), err, ttl.n)
		}
	}

	// Wait for the lock; a signal gives up.
	m := client.NewMutex(s, name)
	lockCtx, lockCancel := context.WithCancel(context.Background())
	defer lockCancel()
	var waitSig os.Signal
	stopWaiting, waited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(waited)
		select {
		case waitSig = <-sigs:
			lockCancel()
		case <-stopWaiting:
		}
	}()
	if err = m.TryLock(lockCtx); errors.Is(err, client.ErrLocked) {
		// Say whom it waits for: a silent wait looks like a hang.
		holder, heldBy := "another session", int64(0)
		ctx, cancel := cf.callCtx()
		if kv, herr := lockHolder(ctx, c, name); herr == nil && kv != nil {
			holder, heldBy = fmt.Sprintf("lease %d (key %s)", kv.Lease, kv.Key), kv.Lease
		}
		cancel()
		notice(cf, lockNotice{Event: "waiting", Name: name, Lease: s.Lease(), HeldBy: heldBy},
			"concord lock: waiting for %s, held by %s", name, holder)
		err = m.Lock(lockCtx)
	}
	close(stopWaiting)
	<-waited
	if waitSig != nil {
		closeSession() // deletes our place in the queue, or the lock
		fmt.Fprintf(os.Stderr, "concord lock: interrupted by %v before %s was acquired\n", waitSig, name)
		return exitStatus{code: signalExit(waitSig)}
	}
	if err != nil {
		closeSession()
		if errors.Is(err, client.ErrSessionExpired) {
			return fmt.Errorf("waiting for %s: %w", name, err)
		}
		return err
	}
	token := m.FencingToken()
	notice(cf, lockNotice{Event: "acquired", Name: name, Key: m.Key(), Lease: s.Lease(), FencingToken: token},
		"concord lock: holding %s (key %s, fencing token %d)", name, m.Key(), token)

	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), fencingTokenEnv+"="+strconv.FormatInt(token, 10))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // signals reach CMD's children too
	if err := cmd.Start(); err != nil {
		release(cf, m, closeSession)
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	group := -cmd.Process.Pid
	lostCh := s.Done()
	lost := false
	var killAfter <-chan time.Time
	for waiting := true; waiting; {
		select {
		case <-exited:
			waiting = false
		case sig := <-sigs:
			_ = syscall.Kill(group, sig.(syscall.Signal))
		case <-lostCh:
			lostCh, lost = nil, true
			fmt.Fprintf(os.Stderr, "concord lock: session lost, %s may have a new holder; stopping %s\n", name, cmdArgs[0])
			_ = syscall.Kill(group, syscall.SIGTERM)
			killAfter = time.After(*grace)
		case <-killAfter:
			_ = syscall.Kill(group, syscall.SIGKILL)
		}
	}
	if lost {
		closeSession()
		return exitStatus{exitLost, fmt.Errorf("%w: the lock %s was lost while %s ran; it was killed", errLost, name, cmdArgs[0])}
	}
	release(cf, m, closeSession)
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return exitStatus{code: signalExit(ws.Signal())}
	}
	return exitStatus{code: ws.ExitStatus()}
}

// lockNotice is what lock --json prints on stderr once it holds the lock.
type lockNotice struct {
	Event        string `json:"event"`
	Name         string `json:"name"`
	Key          string `json:"key,omitempty"`
	Lease        int64  `json:"lease"`
	FencingToken int64  `json:"fencing_token,omitempty"`
	// HeldBy is the holder's lease, on "waiting" when it is known.
	HeldBy int64 `json:"held_by,omitempty"`
}

// release unlocks and ends the session; a failure leaves the lock to
// expire with the lease.
func release(cf *common, m *client.Mutex, closeSession func()) {
	ctx, cancel := cf.callCtx()
	defer cancel()
	if err := m.Unlock(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "concord lock: unlock: %v\n", err)
	}
	closeSession()
}

// notice prints a status message on stderr: v as JSON with --json, else
// the text.
func notice(cf *common, v any, format string, args ...any) {
	if cf.json {
		_ = printJSON(os.Stderr, v)
		return
	}
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
