package decode

import (
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
)

// Tenants. A request that crosses from a tenant's NATS account into
// Concord's through a service import carries the Nats-Request-Info header,
// which the NATS server writes itself: the requester's account is its
// "acc". The server replaces a header of that name a client sent, but not
// one hidden in a line a client ends with a bare line feed, which nats.go
// then reads as a second value of the same header: a request with more
// than one value is refused, never read by its first. A request from
// Concord's own account crosses no import and has no such header: it is
// the default tenant's. A client in Concord's own account can write the
// header itself, so that account is the operator's (docs/tenancy.md).

// HeaderRequestInfo is the header a NATS server stamps on a request that
// crosses accounts through a service import.
const HeaderRequestInfo = "Nats-Request-Info"

// requestInfo is the part of the header Concord reads.
type requestInfo struct {
	Account string `json:"acc"`
}

// Tenant returns the tenant of a request: fsm.DefaultTenant when the
// request crossed no account boundary, else the account the NATS server
// says it came from.
func Tenant(m *nats.Msg) (string, *schema.Error) {
	vals := m.Header.Values(HeaderRequestInfo)
	switch len(vals) {
	case 0:
		return fsm.DefaultTenant, nil
	case 1:
	default:
		return "", Invalid("the request carries the %s header %d times; the NATS server writes it once, so the request is refused", HeaderRequestInfo, len(vals))
	}
	info, ok := scanRequestInfo(vals[0])
	if !ok {
		// Anything the fast path does not read, encoding/json does.
		if err := json.Unmarshal([]byte(vals[0]), &info); err != nil {
			return "", Invalid("the %s header is not the JSON object a NATS server writes: %v", HeaderRequestInfo, err)
		}
	}
	if info.Account == "" {
		return "", Invalid("the %s header names no account (acc)", HeaderRequestInfo)
	}
	if err := fsm.ValidateTenant(info.Account); err != nil {
		return "", Invalid("the %s header names account %q, which is not a NATS account name", HeaderRequestInfo, shorten(info.Account))
	}
	return info.Account, nil
}

// scanRequestInfo reads the header as the NATS server writes it without
// share, the common case: {"acc":"NAME","rtt":N} with a name that needs no
// escapes. Every tenant request carries one, and encoding/json cost a
// microsecond of each. Anything else is not ok, and left to encoding/json.
func scanRequestInfo(v string) (requestInfo, bool) {
	const lead, rtt = `{"acc":"`, `","rtt":`
	rest, ok := strings.CutPrefix(v, lead)
	if !ok {
		return requestInfo{}, false
	}
	end := strings.IndexByte(rest, '"')
	if end < 0 || strings.IndexByte(rest[:end], '\\') >= 0 {
		return requestInfo{}, false
	}
	num, ok := strings.CutPrefix(rest[end:], rtt)
	if !ok || len(num) < 2 || num[len(num)-1] != '}' {
		return requestInfo{}, false
	}
	for _, c := range num[:len(num)-1] {
		if c < '0' || c > '9' {
			return requestInfo{}, false
		}
	}
	return requestInfo{Account: rest[:end]}, true
}
