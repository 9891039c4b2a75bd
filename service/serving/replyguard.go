package serving

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// A requester chooses the subject its reply goes to, and the node publishes
// the reply there with its own permissions. Left unchecked, anyone allowed
// to send a read could make the leader publish on a watch subject (forging
// an event) or on a request subject (sending a request as the node). So a
// request whose reply subject is not one a reply may go to is dropped
// before anything is done: not executed, not answered, only counted and
// logged. The shipped NATS roles add a second wall: the node's serving
// connection may publish replies only under _INBOX., and watch events go
// out on a connection of their own (see deploy/nats/roles.conf).

// Reasons a reply subject is refused; the label values of
// concord_requests_refused_reply_total.
const (
	replyRefusedOwnSpace = "concord_subject" // under the subject prefix
	replyRefusedSystem   = "system_subject"  // a $-subject: $SYS, $SRV, $JS, ...
	replyRefusedInvalid  = "invalid_subject" // wildcards, empty tokens, spaces
)

// replyRefusedReasons lists every reason, so the metric has all its series
// from the start.
var replyRefusedReasons = []string{replyRefusedOwnSpace, replyRefusedSystem, replyRefusedInvalid}

// checkReply returns why a reply may not go to subject, or "" when it may.
// An empty reply subject (a plain publish) is allowed: nothing is sent.
func checkReply(prefix, subject string) string {
	if subject == "" {
		return ""
	}
	if !validReplySubject(subject) {
		return replyRefusedInvalid
	}
	if subject == prefix || strings.HasPrefix(subject, prefix+".") {
		return replyRefusedOwnSpace
	}
	if subject[0] == '$' {
		return replyRefusedSystem
	}
	return ""
}

// validReplySubject reports whether subject is a literal NATS subject: no
// wildcards, no empty tokens, no white space or control bytes.
func validReplySubject(subject string) bool {
	tokenStart := true
	for i := 0; i < len(subject); i++ {
		switch c := subject[i]; {
		case c == '.':
			if tokenStart {
				return false
			}
			tokenStart = true
			continue
		case c <= ' ' || c == 0x7f:
			return false
		case (c == '*' || c == '>') && tokenStart && (i+1 == len(subject) || subject[i+1] == '.'):
			return false
		}
		tokenStart = false
	}
	return !tokenStart
}

// replyAllowed reports whether m may be served; a refused request is
// counted and logged (at most one line per replyLogEvery).
func (s *Server) ReplyAllowed(m *nats.Msg) bool {
	if s.cfg.TestAllowAnyReply {
		return true
	}
	reason := checkReply(s.cfg.Names.Prefix(), m.Reply)
	if reason == "" {
		return true
	}
	s.cfg.RefusedReplies.WithLabelValues(reason).Inc()
	if s.replyLog.Allow() {
		s.cfg.Log.Warn("refused a request whose reply subject is not one a reply may go to; it was not executed and not answered",
			"subject", m.Subject, "reply", m.Reply, "reason", reason)
	}
	return false
}

// replyLogEvery spaces the log lines about refused reply subjects, so a
// flood of them cannot flood the log.
const replyLogEvery = 10 * time.Second
