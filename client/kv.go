package client

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/concord-io/concord/schema"
)

// The plain forms of the common key calls. They take the key as a string
// and build the typed request, which stays available (Get, Put, Delete)
// for everything else: limits, keys_only, prev_kv, serializable reads.

// ErrKeyNotFound is returned by GetKey for a key that does not exist. The
// server answers such a read with no records, not with an error; only
// GetKey turns that into one.
var ErrKeyNotFound = errors.New("concord: key not found")

// GetOption sets an optional field of the request GetKey and GetPrefix
// send.
type GetOption func(*schema.KVGetRequest)

// AtRevision reads the keys as they stood right after revision rev
// committed: values, create and mod revisions, versions and leases as they
// were then, without RemainingMS (a past record has no time left to tell).
// 0 means the present. A revision below the compaction floor gives
// ErrCompacted (its description names the floor); one above the current
// revision gives ErrInvalidRequest.
//
// To page through a prefix as one snapshot, read the first page, then pass
// AtRevision(first.Revision) with AfterKey on every later page: writes made
// meanwhile do not show.
func AtRevision(rev int64) GetOption {
	return func(r *schema.KVGetRequest) { r.Revision = rev }
}

// AfterKey continues a GetPrefix or GetRange listing after key, the last
// key of the page before. It applies to prefix and range reads only;
// GetKey refuses it with ErrInvalidRequest.
func AfterKey(key string) GetOption {
	return func(r *schema.KVGetRequest) { r.After = key }
}

// GetKey reads one key. A key that does not exist (or, with AtRevision,
// did not exist then) gives ErrKeyNotFound.
func (c *Client) GetKey(ctx context.Context, key string, opts ...GetOption) (*schema.KeyValue, error) {
	req := schema.KVGetRequest{Key: &key}
	for _, o := range opts {
		o(&req)
	}
	r, err := c.Get(ctx, req)
	if err != nil {
		return nil, err
	}
	if len(r.KVs) == 0 {
		return nil, ErrKeyNotFound
	}
	return &r.KVs[0], nil
}

// GetPrefix reads the keys that start with prefix ("" means every key), in
// key order, up to the server's default limit of 1000. The reply's
// Revision is the one to Watch from; when More is set, continue with
// AfterKey set to the last key (and AtRevision set to the first page's
// Revision, for one consistent snapshot).
func (c *Client) GetPrefix(ctx context.Context, prefix string, opts ...GetOption) (*schema.KVGetReply, error) {
	req := schema.KVGetRequest{Prefix: &prefix}
	for _, o := range opts {
		o(&req)
	}
	return c.Get(ctx, req)
}

// GetRange reads the keys in the byte-wise, half-open range [start, end),
// in key order, up to the server's default limit of 1000; end "" means to
// the end of the keyspace. Ranges compare bytes, not tokens: the keys
// under "svc." and nothing else are GetRange(ctx, "svc.", "svc/") ('/'
// follows '.'), while GetPrefix(ctx, "svc") also matches "svcx.a". It
// takes the options GetPrefix does: AtRevision reads the range as it
// stood then, and AfterKey continues a listing whose More is set. An end
// at or before start gives ErrInvalidRequest.
func (c *Client) GetRange(ctx context.Context, start, end string, opts ...GetOption) (*schema.KVGetReply, error) {
	req := schema.KVGetRequest{RangeStart: &start}
	if end != "" {
		req.RangeEnd = &end
	}
	for _, o := range opts {
		o(&req)
	}
	return c.Get(ctx, req)
}

// DeleteKey deletes one key; deleting a key that does not exist is not an
// error (the reply's Deleted is 0).
func (c *Client) DeleteKey(ctx context.Context, key string) (*schema.KVDeleteReply, error) {
	return c.Delete(ctx, schema.KVDeleteRequest{Key: &key})
}

// DeletePrefix deletes every key that starts with prefix ("" means every
// key), at one revision.
func (c *Client) DeletePrefix(ctx context.Context, prefix string) (*schema.KVDeleteReply, error) {
	return c.Delete(ctx, schema.KVDeleteRequest{Prefix: &prefix})
}

// DeleteRange deletes every key in the byte-wise, half-open range
// [start, end) at one revision; end "" means to the end of the keyspace.
// An end at or before start gives ErrInvalidRequest and deletes nothing.
func (c *Client) DeleteRange(ctx context.Context, start, end string) (*schema.KVDeleteReply, error) {
	req := schema.KVDeleteRequest{RangeStart: &start}
	if end != "" {
		req.RangeEnd = &end
	}
	return c.Delete(ctx, req)
}

// PutOption sets an optional field of PutKey's request.
type PutOption func(*schema.KVPutRequest)

// WithLease attaches the key to lease id, such as a Session's Lease(): the
// key is deleted when the lease expires or is revoked.
func WithLease(id int64) PutOption {
	return func(r *schema.KVPutRequest) { r.Lease = &id }
}

// WithTTL gives the key a lease of its own that expires after ttl, rounded
// up to whole seconds (the API's unit), so the key lives at least ttl. It
// cannot be kept alive: put the key again with a ttl to extend it.
func WithTTL(ttl time.Duration) PutOption {
	secs := int64((ttl + time.Second - 1) / time.Second)
	return func(r *schema.KVPutRequest) { r.TTL = &secs }
}

// WithContentType stores ct with the value, such as "application/json" or
// "text/plain; charset=utf-8": printable ASCII of at most 256 bytes, which
// Concord returns unchanged in reads, history, watch events and the change
// log and never interprets. Anything else gives ErrInvalidRequest.
func WithContentType(ct string) PutOption {
	return func(r *schema.KVPutRequest) { r.ContentType = ct }
}

// WithMetadata stores md, a JSON object of at most 4 KiB (compact), with
// the value, returned unchanged like the content type. JSON that is not an
// object gives ErrInvalidRequest, a larger object ErrTooLarge. A put
// replaces the whole record: a put without WithContentType or WithMetadata
// clears what the key had.
func WithMetadata(md json.RawMessage) PutOption {
	return func(r *schema.KVPutRequest) { r.Metadata = md }
}

// PutKey writes value, which must be JSON, under key. Without options the
// key is attached to no lease (and detached from the one it had), and has
// no content type or metadata (those it had are cleared).
func (c *Client) PutKey(ctx context.Context, key string, value json.RawMessage, opts ...PutOption) (*schema.KVPutReply, error) {
	req := schema.KVPutRequest{Key: key, Value: value}
	for _, o := range opts {
		o(&req)
	}
	return c.Put(ctx, req)
}
