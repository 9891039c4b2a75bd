package schema

import "strconv"

// AppendJSON appends the reply's JSON encoding to b: exactly what
// encoding/json writes with HTML escaping off (a test holds it to that).
// A page of ten thousand keys through encoding/json spends most of its
// time in reflection and in re-compacting every stored value, and its
// garbage makes the collector run beside the writes. Values and metadata
// are written as stored, which the state machine keeps compact, as
// Event.AppendJSON does.
func (r *KVGetReply) AppendJSON(b []byte) []byte { return r.AppendJSONYielding(b, nil) }

// AppendJSONYielding is AppendJSON calling yield, when not nil, after
// every ListYieldEvery records: a page of ten thousand takes milliseconds
// to write, and a server that writes it beside its writes' goroutines
// passes runtime.Gosched.
func (r *KVGetReply) AppendJSONYielding(b []byte, yield func()) []byte {
	b = append(b, `{"revision":`...)
	b = strconv.AppendInt(b, r.Revision, 10)
	b = append(b, `,"kvs":`...)
	b = appendList(b, r.KVs, (*KeyValue).AppendJSON, yield)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, r.Count, 10)
	b = append(b, `,"more":`...)
	b = strconv.AppendBool(b, r.More)
	return append(b, '}')
}

// AppendJSON appends the record's JSON encoding to b, as KVGetReply's.
func (kv *KeyValue) AppendJSON(b []byte) []byte {
	b = append(b, `{"key":`...)
	b = appendJSONString(b, kv.Key)
	if len(kv.Value) > 0 {
		b = append(b, `,"value":`...)
		b = append(b, kv.Value...)
	}
	b = append(b, `,"create_revision":`...)
	b = strconv.AppendInt(b, kv.CreateRevision, 10)
	b = append(b, `,"mod_revision":`...)
	b = strconv.AppendInt(b, kv.ModRevision, 10)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, kv.Version, 10)
	if kv.Lease != 0 {
		b = append(b, `,"lease":`...)
		b = strconv.AppendInt(b, kv.Lease, 10)
	}
	if kv.RemainingMS != nil {
		b = append(b, `,"remaining_ms":`...)
		b = strconv.AppendInt(b, *kv.RemainingMS, 10)
	}
	if kv.ContentType != "" {
		b = append(b, `,"content_type":`...)
		b = appendJSONString(b, kv.ContentType)
	}
	if len(kv.Metadata) > 0 {
		b = append(b, `,"metadata":`...)
		b = append(b, kv.Metadata...)
	}
	return append(b, '}')
}

// AppendJSON appends the reply's JSON encoding to b, as KVGetReply's.
func (r *KVChangesReply) AppendJSON(b []byte) []byte {
	b = append(b, `{"events":`...)
	b = appendList(b, r.Events, (*Event).AppendJSON, nil)
	b = append(b, `,"next_revision":`...)
	b = strconv.AppendInt(b, r.NextRevision, 10)
	b = append(b, `,"next_op_index":`...)
	b = strconv.AppendInt(b, int64(r.NextOpIndex), 10)
	b = append(b, `,"more":`...)
	b = strconv.AppendBool(b, r.More)
	b = append(b, `,"compact_revision":`...)
	b = strconv.AppendInt(b, r.CompactRevision, 10)
	return append(b, '}')
}

// AppendJSON appends the reply's JSON encoding to b, as KVGetReply's.
func (r *KVHistoryReply) AppendJSON(b []byte) []byte {
	b = append(b, `{"key":`...)
	b = appendJSONString(b, r.Key)
	b = append(b, `,"records":`...)
	b = appendList(b, r.Records, (*Event).AppendJSON, nil)
	b = append(b, `,"more":`...)
	b = strconv.AppendBool(b, r.More)
	if r.NextRevision != 0 {
		b = append(b, `,"next_revision":`...)
		b = strconv.AppendInt(b, r.NextRevision, 10)
	}
	b = append(b, `,"revision":`...)
	b = strconv.AppendInt(b, r.Revision, 10)
	b = append(b, `,"compact_revision":`...)
	b = strconv.AppendInt(b, r.CompactRevision, 10)
	return append(b, '}')
}

// ListYieldEvery is how many records AppendJSONYielding writes between
// calls of its yield.
const ListYieldEvery = 256

// appendList writes a slice as encoding/json does: null when nil, else
// each item by appendOne, in brackets; yield, when not nil, is called
// after every ListYieldEvery items.
func appendList[T any](b []byte, items []T, appendOne func(*T, []byte) []byte, yield func()) []byte {
	if items == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range items {
		if i > 0 {
			b = append(b, ',')
			if yield != nil && i%ListYieldEvery == 0 {
				yield()
			}
		}
		b = appendOne(&items[i], b)
	}
	return append(b, ']')
}
