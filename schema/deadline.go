package schema

import (
	"fmt"
	"strconv"
	"time"
)

// HeaderDeadline carries a request's deadline: the moment after which its
// requester no longer waits for the reply, as unix time in milliseconds.
// No node starts a request after its deadline by the node's own clock
// (a write that has not entered the Raft log by then never will), so once
// the deadline has passed, plus however far the node's clock runs behind
// the requester's, a request whose outcome was unknown stays as it is.
// Without the header a request has no deadline.
const HeaderDeadline = "Concord-Deadline"

// FormatDeadline is the header value of deadline t.
func FormatDeadline(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// ParseDeadline reads a Concord-Deadline header value: the zero time for
// "" (no deadline), an error for anything but a positive integer of unix
// milliseconds.
func ParseDeadline(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || len(v) > 16 {
		return time.Time{}, fmt.Errorf("the %s header %q is not a deadline: give unix time in milliseconds, such as %s", HeaderDeadline, shortHeader(v), FormatDeadline(time.Unix(1_800_000_000, 0)))
	}
	return time.UnixMilli(ms), nil
}

// shortHeader cuts a header value for an error description.
func shortHeader(v string) string {
	if len(v) > 40 {
		return v[:40] + "…"
	}
	return v
}
