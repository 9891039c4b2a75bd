package service

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
)

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

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
func (s *Service) respond(m *nats.Msg, reply any, e *schema.Error) *schema.Error {
	if m.Reply == "" {
		return e
	}
	if e == nil {
		data, err := marshal(reply)
		if err == nil && int64(len(data)) > s.maxPayload {
			e = schema.Errorf(schema.ErrTooLarge, "the request was served, but its reply of %d bytes exceeds the NATS max payload of %d bytes", len(data), s.maxPayload)
		} else if err == nil {
			if err := s.nc.Publish(m.Reply, data); err != nil {
				s.log.Debug("send reply", "subject", m.Subject, "err", err)
			}
			return nil
		}
		if e == nil {
			e = schema.Errorf(schema.ErrInternal, "encode reply: %v", err)
		}
	}
	data, _ := marshal(schema.ErrorReply{Error: e})
	msg := &nats.Msg{
		Subject: m.Reply,
		Header: nats.Header{
			schema.HeaderErrorCode: []string{strconv.Itoa(e.Code)},
			schema.HeaderError:     []string{e.Description},
		},
		Data: data,
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Debug("send error reply", "subject", m.Subject, "err", err)
	}
	return e
}
