package main

import (
	"context"
	"errors"
	"fmt"
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
		// As a call returns it, and wrapped with a command's context.
		reply := &client.Error{Code: spec.Code, Name: spec.Name, Description: "d"}
		for _, err := range []error{reply, fmt.Errorf("lease grant: %w", reply)} {
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
