package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/concord-io/concord/fsm"
	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/subjects"
)

// A Decoder turns a request body into an fsm command or a read query,
// checking everything that does not depend on state, under the limits of a
// node's configuration (the fixed ones are in schema/limits.go). It never
// touches Raft, so bad input is answered with 400/413 and changes nothing.
// It does not change after New and is safe for concurrent use. Every
// request Decoder is a method, whether or not it reads a limit.
type Decoder struct {
	minTTL           int64
	maxKeyBytes      int
	maxValueBytes    int
	maxMetadataBytes int
	maxTxnCompares   int
	maxTxnOps        int
	maxTxnBytes      int
	// replyBytes is what a reply may carry: the connection's max payload
	// less ReplyHeadroom. A transaction's reads share it.
	replyBytes int
}

// ReplyHeadroom is kept free below the connection's max payload for the
// reply's envelope and headers.
const ReplyHeadroom = 16 << 10

// Limits are the configured limits a decoder checks requests
// against, as a value: the decoder needs nothing else of the node's
// configuration.
type Limits struct {
	MinTTL                                       int64 // seconds
	MaxKeyBytes, MaxValueBytes, MaxMetadataBytes int
	MaxTxnCompares, MaxTxnOps, MaxTxnBytes       int
}

// New returns the decoder of limits for a connection whose max
// payload is maxPayload.
func New(limits Limits, maxPayload int64) Decoder {
	return Decoder{
		minTTL:           limits.MinTTL,
		maxKeyBytes:      limits.MaxKeyBytes,
		maxValueBytes:    limits.MaxValueBytes,
		maxMetadataBytes: limits.MaxMetadataBytes,
		maxTxnCompares:   limits.MaxTxnCompares,
		maxTxnOps:        limits.MaxTxnOps,
		maxTxnBytes:      limits.MaxTxnBytes,
		replyBytes:       int(maxPayload) - ReplyHeadroom,
	}
}

// ReplyBytes is what a reply may carry: the connection's max payload less
// ReplyHeadroom.
func (d *Decoder) ReplyBytes() int { return d.replyBytes }

// Deadline reads the request's deadline (schema.HeaderDeadline),
// the zero time for none, and refuses a request whose deadline has passed
// at now: its requester is gone, and a write that starts after it would
// turn an outcome the requester may have been told is unknown into one it
// never learns of. A backlog that built up while the node was paused, or
// behind a link that was down, is shed rather than applied.
func Deadline(m *nats.Msg, now time.Time) (time.Time, *schema.Error) {
	if m.Header == nil {
		return time.Time{}, nil
	}
	d, err := schema.ParseDeadline(m.Header.Get(schema.HeaderDeadline))
	if err != nil {
		return time.Time{}, Invalid("%v", err)
	}
	if !d.IsZero() && now.After(d) {
		return d, DeadlinePassed(now.Sub(d))
	}
	return d, nil
}

// DeadlinePassed is the reply to a request not started because its
// deadline passed late ago.
func DeadlinePassed(late time.Duration) *schema.Error {
	return schema.Errorf(schema.ErrUnavailable, "the request's deadline (%s header) passed %s ago by this node's clock, before the node could start it; nothing was changed. "+
		"If its requester did not give up that long ago, this node's clock runs ahead of the requester's", schema.HeaderDeadline, late.Round(time.Millisecond))
}

func Invalid(format string, args ...any) *schema.Error {
	return schema.Errorf(schema.ErrInvalidRequest, format, args...)
}

// Strict decodes one JSON object into v, rejecting unknown fields,
// wrong types and trailing data, with a description that names the field.
func Strict(data []byte, v any) *schema.Error {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return Invalid("the request body is empty; send a JSON object")
	}
	if trimmed[0] != '{' {
		return Invalid("the request body must be a JSON object, not %s", jsonKind(trimmed))
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeJSONError(trimmed, len(data)-len(trimmed), v, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Invalid("the request body must hold one JSON object and nothing after it")
	}
	return nil
}

// jsonKind names the kind of the JSON value that raw starts with, for a
// description: "an array", "a string", "a number", "true", "false", "null".
func jsonKind(raw []byte) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch c := raw[0]; {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	case bytes.HasPrefix(raw, []byte("true")):
		return "true"
	case bytes.HasPrefix(raw, []byte("false")):
		return "false"
	case bytes.HasPrefix(raw, []byte("null")):
		return "null"
	}
	return "text that is not JSON"
}

// hasMember reports whether the JSON object data has a member called name
// (as encoding/json matches names: ignoring case) that is not null. It
// tells a field that is missing from one sent as 0, on the error path only.
func hasMember(data []byte, name string) bool {
	var members map[string]json.RawMessage
	if json.Unmarshal(data, &members) != nil {
		return false
	}
	for k, v := range members {
		if strings.EqualFold(k, name) && !bytes.Equal(v, []byte("null")) {
			return true
		}
	}
	return false
}

// keyInvalid describes a key rule that the value of field breaks.
func keyInvalid(field string, err error) *schema.Error {
	var ke *subjects.KeyError
	if errors.As(err, &ke) {
		return Invalid("%s %s", field, ke.Rule)
	}
	return Invalid("%s is not a valid key: %v", field, err)
}

func (d *Decoder) checkKey(field, key string) *schema.Error {
	if err := subjects.ValidateKey(key, d.maxKeyBytes); err != nil {
		return keyInvalid(field, err)
	}
	return nil
}

// checkLeaseID checks a lease id that is required: 0 means it is missing.
func checkLeaseID(field string, id int64) *schema.Error {
	if id == 0 {
		return Invalid("%s is required: a lease id from 1 to %d", field, int64(schema.MaxLeaseID))
	}
	return checkLeaseIDRange(field, id)
}

// checkLeaseIDRange checks that a given lease id is one a lease can have.
func checkLeaseIDRange(field string, id int64) *schema.Error {
	if id < 1 || id > schema.MaxLeaseID {
		return Invalid("%s must be a lease id from 1 to %d, not %d", field, int64(schema.MaxLeaseID), id)
	}
	return nil
}

func (d *Decoder) checkTTL(field string, ttl int64) *schema.Error {
	switch {
	case ttl < d.minTTL:
		return Invalid("%s must be at least %s, not %d", field, seconds(d.minTTL), ttl)
	case ttl > schema.MaxTTL:
		return Invalid("%s must be at most %s (100 years), not %d", field, seconds(schema.MaxTTL), ttl)
	}
	return nil
}

// seconds writes n seconds in words: "1 second", "10 seconds".
func seconds(n int64) string {
	if n == 1 {
		return "1 second"
	}
	return fmt.Sprintf("%d seconds", n)
}

// tooLarge describes a part of a request over its size limit.
func tooLarge(what string, size, max int) *schema.Error {
	return schema.Errorf(schema.ErrTooLarge, "%s is %d bytes, more than the %d allowed", what, size, max)
}

// compactJSON returns the compact encoding of raw (which the decoder has
// already checked is valid JSON).
func compactJSON(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

func (d *Decoder) Grant(data []byte) (*fsm.Grant, *schema.Error) {
	var req schema.LeaseGrantRequest
	hasTTL := true
	if f, ok := decodeIntObject(data, "ttl", "id"); ok {
		req.TTL, req.ID, hasTTL = f.val[0], f.val[1], f.present[0]
	} else if e := Strict(data, &req); e != nil {
		return nil, e
	} else {
		hasTTL = req.TTL != 0 || hasMember(data, "ttl")
	}
	if !hasTTL {
		return nil, Invalid("ttl is required: the lease's time to live in whole seconds, at least %s", seconds(d.minTTL))
	}
	if e := d.checkTTL("ttl", req.TTL); e != nil {
		return nil, e
	}
	if req.ID != 0 {
		if e := checkLeaseIDRange("id", req.ID); e != nil {
			return nil, e
		}
	}
	g := &fsm.Grant{ID: req.ID, TTL: req.TTL}
	if len(req.Metadata) > 0 && !bytes.Equal(req.Metadata, []byte("null")) {
		md := compactJSON(req.Metadata)
		if md[0] != '{' {
			return nil, Invalid("metadata must be a JSON object, not %s", jsonKind(md))
		}
		if len(md) > d.maxMetadataBytes {
			return nil, tooLarge("metadata", len(md), d.maxMetadataBytes)
		}
		g.Metadata = md
	}
	return g, nil
}

func (d *Decoder) KeepAlive(data []byte) (*fsm.KeepAlive, *schema.Error) {
	var req schema.LeaseKeepAliveRequest
	if f, ok := decodeIntObject(data, "id", "ttl"); ok {
		req.ID = f.val[0]
		if f.present[1] {
			req.TTL = &f.val[1]
		}
	} else if e := Strict(data, &req); e != nil {
		return nil, e
	}
	if e := checkLeaseID("id", req.ID); e != nil {
		return nil, e
	}
	k := &fsm.KeepAlive{ID: req.ID}
	if req.TTL != nil {
		if e := d.checkTTL("ttl", *req.TTL); e != nil {
			return nil, e
		}
		k.TTL = *req.TTL
	}
	return k, nil
}

func (d *Decoder) KeepAliveMany(data []byte) (*fsm.KeepAliveMany, *schema.Error) {
	var req schema.LeaseKeepAliveManyRequest
	if e := Strict(data, &req); e != nil {
		return nil, e
	}
	switch {
	case len(req.IDs) == 0:
		return nil, Invalid("ids is required: a list of 1 to %d lease ids", schema.MaxKeepAliveMany)
	case len(req.IDs) > schema.MaxKeepAliveMany:
		return nil, Invalid("ids lists %d lease ids, more than the %d one request may renew", len(req.IDs), schema.MaxKeepAliveMany)
	}
	for i, id := range req.IDs {
		if e := checkLeaseIDRange(fmt.Sprintf("ids[%d]", i), id); e != nil {
			return nil, e
		}
	}
	return &fsm.KeepAliveMany{IDs: req.IDs}, nil
}

func (d *Decoder) Changes(data []byte) (fsm.ChangesQuery, *schema.Error) {
	var req schema.KVChangesRequest
	if e := Strict(data, &req); e != nil {
		return fsm.ChangesQuery{}, e
	}
	sel, e := d.selection(req.Key, req.Prefix, req.RangeStart, req.RangeEnd)
	if e != nil {
		return fsm.ChangesQuery{}, e
	}
	key, isPrefix := sel.key, sel.isPrefix
	if req.AfterRevision < 0 {
		return fsm.ChangesQuery{}, Invalid("after_revision must be 0 or more, not %d", req.AfterRevision)
	}
	q := fsm.ChangesQuery{Key: key, IsPrefix: isPrefix, IsRange: sel.isRange, RangeEnd: sel.rangeEnd, AfterRevision: req.AfterRevision, AfterOpIndex: -1, Limit: req.Limit}
	if req.AfterOpIndex != nil {
		if *req.AfterOpIndex < -1 {
			return fsm.ChangesQuery{}, Invalid("after_op_index must be -1 or more, not %d", *req.AfterOpIndex)
		}
		q.AfterOpIndex = *req.AfterOpIndex
	}
	switch {
	case q.Limit == 0:
		q.Limit = schema.DefaultChangesLimit
	case q.Limit < 0 || q.Limit > schema.MaxChangesLimit:
		return fsm.ChangesQuery{}, Invalid("limit must be from 1 to %d, not %d", schema.MaxChangesLimit, q.Limit)
	}
	return q, nil
}

func (d *Decoder) Revoke(data []byte) (*fsm.Revoke, *schema.Error) {
	var req schema.LeaseRevokeRequest
	if e := Strict(data, &req); e != nil {
		return nil, e
	}
	if e := checkLeaseID("id", req.ID); e != nil {
		return nil, e
	}
	return &fsm.Revoke{ID: req.ID}, nil
}

func (d *Decoder) LeaseInfo(data []byte) (*schema.LeaseInfoRequest, *schema.Error) {
	var req schema.LeaseInfoRequest
	if e := Strict(data, &req); e != nil {
		return nil, e
	}
	if e := checkLeaseID("id", req.ID); e != nil {
		return nil, e
	}
	return &req, nil
}

func (d *Decoder) LeaseList(data []byte) (*schema.LeaseListRequest, *schema.Error) {
	var req schema.LeaseListRequest
	if e := Strict(data, &req); e != nil {
		return nil, e
	}
	if req.After < 0 {
		return nil, Invalid("after must be a lease id, 0 or more, not %d", req.After)
	}
	limit, e := checkLimit("", req.Limit, schema.MaxListLimit)
	if e != nil {
		return nil, e
	}
	req.Limit = limit
	return &req, nil
}

// checkLimit turns 0 into the default limit and refuses one outside 1..max.
func checkLimit(at string, limit, max int) (int, *schema.Error) {
	switch {
	case limit == 0:
		return min(schema.DefaultListLimit, max), nil
	case limit < 0 || limit > max:
		return 0, Invalid("%slimit must be from 1 to %d, not %d", at, max, limit)
	}
	return limit, nil
}

func (d *Decoder) Put(data []byte) (*fsm.Put, string, *schema.Error) {
	var req schema.KVPutRequest
	if !decodePutFast(data, &req) {
		req = schema.KVPutRequest{}
		if e := Strict(data, &req); e != nil {
			return nil, "", e
		}
	}
	p, e := d.buildPut("", req.Key, req.Value, req.Lease, req.TTL, req.PrevKV)
	if e == nil {
		e = checkPutExtra("", p, req.ContentType, req.Metadata)
	}
	return p, req.IdempotencyKey, e
}

// checkPutExtra checks a put's content_type and metadata and sets them on
// p: a content type is printable ASCII of at most MaxContentTypeBytes; the
// metadata a JSON object of at most MaxPutMetadataBytes compact (null
// reads as none).
func checkPutExtra(at string, p *fsm.Put, contentType string, metadata json.RawMessage) *schema.Error {
	if len(contentType) > schema.MaxContentTypeBytes {
		return Invalid("%scontent_type is %d bytes long, more than the %d allowed", at, len(contentType), schema.MaxContentTypeBytes)
	}
	for i := 0; i < len(contentType); i++ {
		if c := contentType[i]; c < 0x20 || c > 0x7e {
			return Invalid("%scontent_type must be printable ASCII (such as application/json), without control characters", at)
		}
	}
	p.ContentType = contentType
	if len(metadata) > 0 && !bytes.Equal(metadata, []byte("null")) {
		md := compactJSON(metadata)
		if md[0] != '{' {
			return Invalid("%smetadata must be a JSON object, not %s", at, jsonKind(md))
		}
		if len(md) > schema.MaxPutMetadataBytes {
			return tooLarge(at+"metadata", len(md), schema.MaxPutMetadataBytes)
		}
		p.Metadata = md
	}
	return nil
}

// buildPut checks a put's fields; at prefixes the field names in error
// descriptions (inside a transaction it says which operation).
func (d *Decoder) buildPut(at, key string, value json.RawMessage, lease, ttl *int64, prevKV bool) (*fsm.Put, *schema.Error) {
	if e := d.checkKey(at+"key", key); e != nil {
		return nil, e
	}
	if len(value) == 0 {
		return nil, Invalid("%svalue is required: any JSON value, null included", at)
	}
	p := &fsm.Put{Key: key, Value: compactJSON(value), PrevKV: prevKV}
	if len(p.Value) > d.maxValueBytes {
		return nil, tooLarge(at+"value", len(p.Value), d.maxValueBytes)
	}
	if lease != nil && ttl != nil {
		return nil, Invalid("%slease and %sttl cannot both be given: give one or the other", at, at)
	}
	if lease != nil && *lease != 0 {
		if *lease < 0 || *lease > schema.MaxLeaseID {
			return nil, Invalid("%slease must be a lease id from 1 to %d (or 0 for none), not %d", at, int64(schema.MaxLeaseID), *lease)
		}
		p.Lease = *lease
	}
	if ttl != nil {
		if e := d.checkTTL(at+"ttl", *ttl); e != nil {
			return nil, e
		}
		p.TTL = *ttl
	}
	return p, nil
}

// selection is the keys a request names: one key, a prefix, or the
// byte-wise range [key, rangeEnd), rangeEnd "" meaning no end.
type selection struct {
	key      string
	isPrefix bool
	isRange  bool
	rangeEnd string
}

// selection checks that exactly one of key, prefix and range_start is
// given, and a range_end only with range_start, after it.
func (d *Decoder) selection(key, prefix, rangeStart, rangeEnd *string) (selection, *schema.Error) {
	if rangeStart == nil {
		if rangeEnd != nil {
			return selection{}, Invalid("range_end needs range_start: a range is [range_start, range_end)")
		}
		k, isPrefix, e := d.keyOrPrefix("", key, prefix)
		return selection{key: k, isPrefix: isPrefix}, e
	}
	if key != nil || prefix != nil {
		return selection{}, Invalid("give one of key, prefix and range_start, not several")
	}
	if e := d.checkRangeBound("range_start", *rangeStart); e != nil {
		return selection{}, e
	}
	sel := selection{key: *rangeStart, isRange: true}
	if rangeEnd != nil {
		if e := d.checkRangeBound("range_end", *rangeEnd); e != nil {
			return selection{}, e
		}
		if *rangeEnd <= *rangeStart {
			return selection{}, Invalid("range_end %q must sort after range_start %q (byte-wise); leave range_end out to read to the end of the keyspace", shorten(*rangeEnd), shorten(*rangeStart))
		}
		sel.rangeEnd = *rangeEnd
	}
	return sel, nil
}

// checkRangeBound checks one end of a range: printable ASCII without
// spaces, at most the longest key. A bound need not be a key: "svc/" ends
// the range of every key under "svc.".
func (d *Decoder) checkRangeBound(field, b string) *schema.Error {
	if len(b) > d.maxKeyBytes {
		return Invalid("%s is %d bytes long, more than the %d allowed", field, len(b), d.maxKeyBytes)
	}
	for i := 0; i < len(b); i++ {
		if b[i] < 0x21 || b[i] > 0x7e {
			return Invalid("%s must be printable ASCII without spaces (0x21-0x7E)", field)
		}
	}
	return nil
}

// keyOrPrefix checks that exactly one of key and prefix is given.
func (d *Decoder) keyOrPrefix(at string, key, prefix *string) (string, bool, *schema.Error) {
	switch {
	case key != nil && prefix != nil:
		return "", false, Invalid("%skey and %sprefix cannot both be given: give one of them", at, at)
	case key != nil:
		return *key, false, d.checkKey(at+"key", *key)
	case prefix != nil:
		if err := subjects.ValidatePrefix(*prefix, d.maxKeyBytes); err != nil {
			return "", false, keyInvalid(at+"prefix", err)
		}
		return *prefix, true, nil
	}
	return "", false, Invalid("%skey or %sprefix is required (prefix \"\" means every key)", at, at)
}

// GetRequest is a decoded kv.get: the query, the revision it reads at (0:
// the present) and whether it may be served locally.
type GetRequest struct {
	Query        fsm.GetQuery
	Revision     int64
	Serializable bool
}

func (d *Decoder) Get(data []byte) (GetRequest, *schema.Error) {
	var req schema.KVGetRequest
	if e := Strict(data, &req); e != nil {
		return GetRequest{}, e
	}
	sel, e := d.selection(req.Key, req.Prefix, req.RangeStart, req.RangeEnd)
	if e != nil {
		return GetRequest{}, e
	}
	var q fsm.GetQuery
	if sel.isRange {
		var limit int
		if limit, e = checkLimit("", req.Limit, schema.MaxListLimit); e == nil {
			q = fsm.GetQuery{Key: sel.key, IsRange: true, RangeEnd: sel.rangeEnd, After: req.After, Limit: limit, KeysOnly: req.KeysOnly, CountOnly: req.CountOnly}
		}
	} else {
		q, e = d.buildGet("", req.Key, req.Prefix, req.Limit, req.After, req.KeysOnly, req.CountOnly, schema.MaxListLimit)
	}
	if e != nil {
		return GetRequest{}, e
	}
	if e := checkRevision("revision", req.Revision); e != nil {
		return GetRequest{}, e
	}
	return GetRequest{Query: q, Revision: req.Revision, Serializable: req.Serializable}, nil
}

// HistoryRequest is a decoded kv.history.
type HistoryRequest struct {
	Query        fsm.HistoryQuery
	Serializable bool
}

func (d *Decoder) History(data []byte) (HistoryRequest, *schema.Error) {
	var req schema.KVHistoryRequest
	if e := Strict(data, &req); e != nil {
		return HistoryRequest{}, e
	}
	if err := subjects.ValidateKey(req.Key, d.maxKeyBytes); err != nil {
		return HistoryRequest{}, keyInvalid("key", err)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"from_revision", req.FromRevision}, {"to_revision", req.ToRevision}, {"after_revision", req.AfterRevision}} {
		if e := checkRevision(f.name, f.v); e != nil {
			return HistoryRequest{}, e
		}
	}
	if req.ToRevision != 0 && req.FromRevision > req.ToRevision {
		return HistoryRequest{}, Invalid("from_revision %d is after to_revision %d", req.FromRevision, req.ToRevision)
	}
	limit := req.Limit
	switch {
	case limit == 0:
		limit = schema.DefaultHistoryLimit
	case limit < 0 || limit > schema.MaxHistoryLimit:
		return HistoryRequest{}, Invalid("limit must be from 1 to %d, not %d", schema.MaxHistoryLimit, limit)
	}
	return HistoryRequest{Query: fsm.HistoryQuery{Key: req.Key, From: req.FromRevision, To: req.ToRevision, After: req.AfterRevision,
		NewestFirst: req.NewestFirst, Limit: limit}, Serializable: req.Serializable}, nil
}

func (d *Decoder) Compact(data []byte) (*fsm.Compact, *schema.Error) {
	var req schema.KVCompactRequest
	if e := Strict(data, &req); e != nil {
		return nil, e
	}
	if req.Revision < 1 {
		return nil, Invalid("revision must be 1 or more, not %d", req.Revision)
	}
	if e := checkRevision("revision", req.Revision); e != nil {
		return nil, e
	}
	return &fsm.Compact{Revision: req.Revision}, nil
}

// checkRevision refuses a revision field that is negative or beyond what
// JSON numbers carry exactly; 0 is left to the caller's meaning.
func checkRevision(field string, rev int64) *schema.Error {
	if rev < 0 || rev > schema.MaxRevision {
		return Invalid("%s must be from 0 to %d, not %d", field, int64(schema.MaxRevision), rev)
	}
	return nil
}

func (d *Decoder) buildGet(at string, key, prefix *string, limit int, after string, keysOnly, countOnly bool, maxLimit int) (fsm.GetQuery, *schema.Error) {
	k, isPrefix, e := d.keyOrPrefix(at, key, prefix)
	if e != nil {
		return fsm.GetQuery{}, e
	}
	if after != "" && !isPrefix {
		return fsm.GetQuery{}, Invalid("%safter applies only to a read by prefix, not by key", at)
	}
	limit, e = checkLimit(at, limit, maxLimit)
	if e != nil {
		return fsm.GetQuery{}, e
	}
	return fsm.GetQuery{Key: k, IsPrefix: isPrefix, After: after, Limit: limit, KeysOnly: keysOnly, CountOnly: countOnly}, nil
}

func (d *Decoder) Delete(data []byte) (*fsm.Delete, string, *schema.Error) {
	var req schema.KVDeleteRequest
	if e := Strict(data, &req); e != nil {
		return nil, "", e
	}
	sel, e := d.selection(req.Key, req.Prefix, req.RangeStart, req.RangeEnd)
	if e != nil {
		return nil, "", e
	}
	return &fsm.Delete{Key: sel.key, IsPrefix: sel.isPrefix, IsRange: sel.isRange, RangeEnd: sel.rangeEnd, PrevKV: req.PrevKV}, req.IdempotencyKey, nil
}
