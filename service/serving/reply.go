package serving

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
)

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// appendPool holds the buffers replies with their own JSON encoder are
// written to (jsonAppender); NATS copies a message when it is published,
// so the buffer goes back at once.
var appendPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledReply bounds the buffers kept: a rare huge reply should not
// pin its memory.
const maxPooledReply = 4 << 20

// jsonAppender is a reply that writes its own JSON, the same bytes
// marshal would write, without reflection or garbage: the listing
// replies, which may carry ten thousand records.
type jsonAppender interface {
	AppendJSON(b []byte) []byte
}

// marshal encodes v without HTML escaping, so a value comes back byte for
// byte as it was stored.
func marshal(v any) ([]byte, error) {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufPool.Put(buf)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	out := buf.Bytes()
	return append([]byte(nil), out[:len(out)-1]...), nil // drop Encode's newline
}

// respond sends a reply or an error reply and returns the error it sent,
// which differs from e when the reply could not be encoded or is too large
// for NATS. Requests without a reply subject (plain publishes) get nothing.
func (s *Server) Respond(m *nats.Msg, reply any, e *schema.Error) *schema.Error {
	if m.Reply == "" {
		return e
	}
	if e == nil {
		if a, ok := reply.(jsonAppender); ok {
			buf := appendPool.Get().(*[]byte)
			*buf = a.AppendJSON((*buf)[:0])
			e = s.publishReply(m, *buf)
			if cap(*buf) <= maxPooledReply {
				appendPool.Put(buf)
			}
		} else if data, err := marshal(reply); err != nil {
			e = schema.Errorf(schema.ErrInternal, "encode reply: %v", err)
		} else {
			e = s.publishReply(m, data)
		}
		if e == nil {
			return nil
		}
	}
	return s.respondError(m, e)
}

// publishReply sends an encoded reply, or returns the error to send
// instead when it is too large for NATS.
func (s *Server) publishReply(m *nats.Msg, data []byte) *schema.Error {
	if int64(len(data)) > s.cfg.MaxPayload {
		return schema.Errorf(schema.ErrTooLarge, "the request was served, but its reply of %d bytes exceeds the NATS max payload of %d bytes", len(data), s.cfg.MaxPayload)
	}
	if err := s.cfg.Conn.Publish(m.Reply, data); err != nil {
		s.cfg.Log.Debug("send reply", "subject", m.Subject, "err", err)
	}
	return nil
}

// respondError sends an error reply: the error as the body and in headers.
func (s *Server) respondError(m *nats.Msg, e *schema.Error) *schema.Error {
	data, _ := marshal(schema.ErrorReply{Error: e})
	msg := &nats.Msg{
		Subject: m.Reply,
		Header: nats.Header{
			schema.HeaderErrorCode: []string{strconv.Itoa(e.Code)},
			schema.HeaderError:     []string{e.Description},
		},
		Data: data,
	}
	if err := s.cfg.Conn.PublishMsg(msg); err != nil {
		s.cfg.Log.Debug("send error reply", "subject", m.Subject, "err", err)
	}
	return e
}
