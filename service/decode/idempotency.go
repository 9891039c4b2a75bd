package decode

import (
	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/schema"
)

// Idempotency keys. A mutating request may carry a key, in its body's
// idempotency_key field (put, delete, txn) or in the Concord-Idempotency-Key
// header (every mutating request); the state machine answers a retry of
// the same key with the first reply (fsm.Result.Cached). The key is part
// of the log entry, so the rules below decide what may enter the log.

// IdempotencyKey returns the request's key, "" for none: the body's key or
// the header's, which must agree when both are given; at most
// schema.MaxIdempotencyKeyBytes bytes of printable ASCII.
func IdempotencyKey(m *nats.Msg, bodyKey string) (string, *schema.Error) {
	key, field := bodyKey, "idempotency_key"
	if h := m.Header.Get(schema.HeaderIdempotencyKey); h != "" {
		if key != "" && key != h {
			return "", Invalid("idempotency_key %q and the %s header %q differ: give one of them, or the same key in both", shorten(key), schema.HeaderIdempotencyKey, shorten(h))
		}
		key, field = h, "the "+schema.HeaderIdempotencyKey+" header"
	}
	if len(key) > schema.MaxIdempotencyKeyBytes {
		return "", Invalid("%s is %d bytes long, more than the %d allowed", field, len(key), schema.MaxIdempotencyKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", Invalid("%s must be ASCII text: letters, digits, punctuation and spaces, without control characters", field)
		}
	}
	return key, nil
}
