package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// The exit code of every error reply the cluster can send, as the usage
// text documents it. A new row in schema.ErrorTable fails this test until
// its exit code is decided here.
var wantExitByName = map[string]int{
	schema.ErrInvalidRequest:      exitError,
	schema.ErrLeaseNotFound:       exitNotFound,
	schema.ErrLeaseExists:         exitConflict,
	schema.ErrNodeNotFound:        exitNotFound,
	schema.ErrClusterMismatch:     exitError,
	schema.ErrBackupNotFound:      exitError,
	schema.ErrLeaseConflict:       exitConflict,
	schema.ErrIdempotencyConflict: exitConflict,
	schema.ErrCompacted:           exitCompacted,
	schema.ErrTooLarge:            exitError,
	schema.ErrLimitExceeded:       exitError,
	schema.ErrNotLeader:           exitUnavailable,
	schema.ErrUnavailable:         exitUnavailable,
	schema.ErrOutcomeUnknown:      exitOutcomeUnknown,
	schema.ErrDiskFull:            exitError,
	schema.ErrForbidden:           exitError,
	schema.ErrInternal:            exitError,
}

func TestExitCodeOfEveryErrorReply(t *testing.T) {
	if len(wantExitByName) != len(schema.ErrorTable) {
		t.Errorf("%d exit codes pinned for %d error names", len(wantExitByName), len(schema.ErrorTable))
	}
	for _, spec := range schema.ErrorTable {
		want, ok := wantExitByName[spec.Name]
		if !ok {
			t.Errorf("%s: no exit code pinned", spec.Name)
			continue
		}
		// As a call returns it, wrapped with a command's context, and as
		// the client's sentinel itself (a call that ran out of retries
		// wraps ErrUnavailable).
		reply := &client.Error{Code: spec.Code, Name: spec.Name, Description: "d"}
		sentinel := fmt.Errorf("kv.get: %w (last attempt: timeout)", client.Sentinel(spec.Name))
		for _, err := range []error{reply, fmt.Errorf("lease grant: %w", reply), sentinel} {
			if got := exitCode(err); got != want {
				t.Errorf("exitCode(%v) = %d, want %d", err, got, want)
			}
		}
	}
	// A name this build does not know (a newer server) is a plain error.
	if got := exitCode(&client.Error{Code: 418, Name: "teapot"}); got != exitError {
		t.Errorf("unknown error name: exit %d, want %d", got, exitError)
	}
}

// The errors that do not come from the table: the client's own, NATS's and
// the commands'.
func TestExitCodeOfOtherErrors(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("anything"), exitError},
		{usagef("bad flag"), exitUsage},
		{fmt.Errorf("x: %w", usagef("bad flag")), exitUsage},
		{exitStatus{code: 42}, 42},
		{exitStatus{code: exitNotFound, err: client.ErrLeaseExists}, exitNotFound},
		{errNotFound, exitNotFound},
		{errLost, exitLost},
		{fmt.Errorf("x: %w", client.ErrSessionExpired), exitLost},
		{client.ErrPermissionDenied, exitDenied},
		{nats.ErrPermissionViolation, exitDenied},
		{nats.ErrAuthorization, exitDenied},
		{nats.ErrAuthExpired, exitDenied},
		{nats.ErrAuthRevoked, exitDenied},
		{nats.ErrAccountAuthExpired, exitDenied},
		{errConnect{errors.New("dial")}, exitUnavailable},
		{context.DeadlineExceeded, exitUnavailable},
		{nats.ErrNoServers, exitUnavailable},
		{nats.ErrTimeout, exitUnavailable},
		{nats.ErrNoResponders, exitUnavailable},
		{nats.ErrConnectionClosed, exitUnavailable},
		{client.ErrBackupCorrupt, exitError},
	}
	for _, c := range cases {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("exitCode(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// The usage text names error replies beside exit codes; each name it gives
// is one whose exit code that is.
func TestExitCodeUsageNamesTheRightErrors(t *testing.T) {
	word := regexp.MustCompile(`[a-z_]+`)
	named := 0
	for _, e := range exitCodes {
		for _, w := range word.FindAllString(e.meaning, -1) {
			spec, ok := schema.LookupError(w)
			if !ok {
				continue
			}
			named++
			if got := exitCode(&client.Error{Code: spec.Code, Name: spec.Name}); got != e.code {
				t.Errorf("the usage text puts %s under exit %d; exitCode gives %d", w, e.code, got)
			}
		}
	}
	if named == 0 {
		t.Error("the usage text names no error reply")
	}
}
