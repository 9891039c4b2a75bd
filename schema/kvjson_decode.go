package schema

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/concord-io/concord/schema/jsonscan"
)

// UnmarshalJSON decodes a kv.get reply exactly as encoding/json decodes
// the struct, only faster for the replies servers write. A client that
// pages through a large prefix decodes a page of ten thousand records
// many times a second; through reflection that took about 17 ms and
// 7.5 MB of garbage a page (BenchmarkKVGetReplyDecode), so a reader on
// the same machine as the node took half a core from everything beside it.
//
// The fast path takes the shapes AppendJSON writes (the field names as
// written, once each; strings without escapes; integers; no nulls) into a
// zero reply, and gives up on anything else, which then goes through
// encoding/json with its rules and errors: the result never depends on
// which path ran (FuzzKVGetReplyUnmarshal). A reply's keys share one
// string and its values one byte slice, so a record kept from a page
// keeps all the page's keys and values alive, though not the message.
func (r *KVGetReply) UnmarshalJSON(data []byte) error {
	if r.Revision == 0 && r.KVs == nil && r.Count == 0 && !r.More {
		var d kvPageDecoder
		if d.decode(data, r) {
			return nil
		}
	}
	type plain KVGetReply // without this method
	return json.Unmarshal(data, (*plain)(r))
}

// DecodeJSON decodes a reply into v as json.Unmarshal does. A
// *KVGetReply it decodes with its UnmarshalJSON directly: json.Unmarshal
// first checks the whole input and then scans it again to hand it over,
// which for a page of ten thousand records took four times as long as
// the decoding (15 ms against 3.4; BenchmarkKVGetReplyDecode). The fast
// path checks all it takes itself, and gives the rest to encoding/json.
func DecodeJSON(data []byte, v any) error {
	if r, ok := v.(*KVGetReply); ok && r != nil {
		return r.UnmarshalJSON(data)
	}
	return json.Unmarshal(data, v)
}

// kvPageDecoder is UnmarshalJSON's fast path. Its methods report false
// (ok) when the input is anything the fast path does not take; they never
// fail otherwise.
type kvPageDecoder struct {
	p  []byte
	i  int
	ok bool
	// kvs are the records read so far, without their strings and raw
	// values, which spans holds as spans of the input until build.
	kvs   []KeyValue
	spans []kvSpans
	// strBytes and rawBytes are what the strings and raw values need.
	strBytes, rawBytes int
}

// kvSpans are a record's strings and raw values as spans of the input,
// [start, end), and its remaining_ms.
type kvSpans struct {
	key, value, ct, meta [2]int32
	remaining            int64
	hasRemaining         bool
}

// kvFields are a record's fields, by the bit that marks one seen.
const (
	fKey = 1 << iota
	fValue
	fCreate
	fMod
	fVersion
	fLease
	fRemaining
	fContentType
	fMetadata
)

func (d *kvPageDecoder) decode(data []byte, r *KVGetReply) bool {
	if len(data) > math.MaxInt32 {
		return false
	}
	d.p, d.ok = data, true
	var out KVGetReply
	var seen int
	gotKVs := false
	d.ws()
	d.list('{', '}', func() {
		name := d.name()
		bit := 0
		switch string(name) {
		case "revision":
			bit = 1
			out.Revision = d.int()
		case "kvs":
			bit = 2
			gotKVs = true
			d.records()
		case "count":
			bit = 4
			out.Count = d.int()
		case "more":
			bit = 8
			out.More = d.bool()
		}
		if bit == 0 || seen&bit != 0 {
			d.ok = false
		}
		seen |= bit
	})
	d.ws()
	if !d.ok || d.i != len(d.p) {
		return false
	}
	if gotKVs {
		out.KVs = d.build()
	}
	*r = out
	return true
}

// records reads the kvs array into d.kvs and d.spans.
func (d *kvPageDecoder) records() {
	// What AppendJSON writes starts each record so: a count that sizes
	// the slices once (a value holding the text only makes them larger).
	n := bytes.Count(d.p[d.i:], []byte(`{"key":`))
	d.kvs, d.spans = make([]KeyValue, 0, n), make([]kvSpans, 0, n)
	d.list('[', ']', d.record)
}

// record reads one record of the kvs array.
func (d *kvPageDecoder) record() {
	var kv KeyValue
	var sp kvSpans
	var seen int
	d.list('{', '}', func() {
		name := d.name()
		bit := 0
		switch string(name) {
		case "key":
			bit = fKey
			d.strField(&sp.key)
		case "value":
			bit = fValue
			d.rawField(&sp.value)
		case "create_revision":
			bit = fCreate
			kv.CreateRevision = d.int()
		case "mod_revision":
			bit = fMod
			kv.ModRevision = d.int()
		case "version":
			bit = fVersion
			kv.Version = d.int()
		case "lease":
			bit = fLease
			kv.Lease = d.int()
		case "remaining_ms":
			bit = fRemaining
			sp.remaining, sp.hasRemaining = d.int(), true
		case "content_type":
			bit = fContentType
			d.strField(&sp.ct)
		case "metadata":
			bit = fMetadata
			d.rawField(&sp.meta)
		}
		if bit == 0 || seen&bit != 0 {
			d.ok = false
		}
		seen |= bit
	})
	d.kvs, d.spans = append(d.kvs, kv), append(d.spans, sp)
}

// strField reads a string field into span, counting its bytes.
func (d *kvPageDecoder) strField(span *[2]int32) {
	*span = span32(d.str())
	d.strBytes += int(span[1] - span[0])
}

// rawField reads a raw value field into span, counting its bytes.
func (d *kvPageDecoder) rawField(span *[2]int32) {
	*span = span32(d.raw())
	d.rawBytes += int(span[1] - span[0])
}

// list reads open, then items separated by commas, each read by item, then
// close.
func (d *kvPageDecoder) list(open, close byte, item func()) {
	d.expect(open)
	d.ws()
	if d.peek() == close {
		d.i++
		return
	}
	for d.ok {
		d.ws()
		item()
		d.ws()
		if d.peek() == close {
			d.i++
			return
		}
		d.expect(',')
	}
}

// build gives the records their strings, cut from one string, and raw
// values, from one slice.
func (d *kvPageDecoder) build() []KeyValue {
	var sb strings.Builder
	sb.Grow(d.strBytes)
	remainders := 0
	for i := range d.spans {
		sp := &d.spans[i]
		sb.Write(d.p[sp.key[0]:sp.key[1]])
		sb.Write(d.p[sp.ct[0]:sp.ct[1]])
		if sp.hasRemaining {
			remainders++
		}
	}
	strs := sb.String()
	raws := make([]byte, 0, d.rawBytes)
	remaining := make([]int64, 0, remainders)
	at := 0
	cut := func(span [2]int32) string {
		s := strs[at : at+int(span[1]-span[0])]
		at += int(span[1] - span[0])
		return s
	}
	raw := func(span [2]int32) json.RawMessage {
		if span[1] == span[0] {
			return nil
		}
		start := len(raws)
		raws = append(raws, d.p[span[0]:span[1]]...)
		return raws[start:len(raws):len(raws)]
	}
	for i := range d.kvs {
		kv, sp := &d.kvs[i], &d.spans[i]
		kv.Key = cut(sp.key)
		kv.ContentType = cut(sp.ct)
		kv.Value = raw(sp.value)
		kv.Metadata = raw(sp.meta)
		if sp.hasRemaining {
			remaining = append(remaining, sp.remaining)
			kv.RemainingMS = &remaining[len(remaining)-1]
		}
	}
	return d.kvs
}

// span32 is a span of the input, which the fast path takes only under
// 2 GiB, as int32s.
func span32(s [2]int) [2]int32 { return [2]int32{int32(s[0]), int32(s[1])} }

func (d *kvPageDecoder) peek() byte {
	if d.i < len(d.p) {
		return d.p[d.i]
	}
	return 0
}

func (d *kvPageDecoder) expect(c byte) {
	if d.peek() != c {
		d.ok = false
		return
	}
	d.i++
}

// ws skips JSON white space.
func (d *kvPageDecoder) ws() { d.i = jsonscan.SkipSpace(d.p, d.i) }

// name reads an object's member name (printable ASCII, as every name the
// fast path takes is) and its colon.
func (d *kvPageDecoder) name() []byte {
	n, next, ok := jsonscan.String(d.p, d.i)
	if !ok {
		d.ok = false
		return nil
	}
	d.i = next
	d.ws()
	d.expect(':')
	d.ws()
	return n
}

// str reads a string without escapes, and returns the span of its
// contents: jsonscan.String's rule widened to valid UTF-8, which keys
// often hold and which encoding/json keeps as it is. Escapes, control
// characters and invalid UTF-8 are left to encoding/json, which unescapes
// or replaces them.
func (d *kvPageDecoder) str() [2]int {
	if d.peek() != '"' {
		d.ok = false
		return [2]int{}
	}
	start := d.i + 1
	ascii := true
	for j := start; j < len(d.p); j++ {
		c := d.p[j]
		if c == '"' {
			if !ascii && !utf8.Valid(d.p[start:j]) {
				break
			}
			d.i = j + 1
			return [2]int{start, j}
		}
		if c == '\\' || c < 0x20 {
			break
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	d.ok = false
	return [2]int{}
}

// int reads an integer as jsonscan.Int takes it (at most 18 digits;
// longer ones go to encoding/json).
func (d *kvPageDecoder) int() int64 {
	v, next, ok := jsonscan.Int(d.p, d.i)
	if !ok {
		d.ok = false
	}
	d.i = next
	return v
}

func (d *kvPageDecoder) bool() bool {
	switch {
	case len(d.p)-d.i >= 4 && string(d.p[d.i:d.i+4]) == "true":
		d.i += 4
		return true
	case len(d.p)-d.i >= 5 && string(d.p[d.i:d.i+5]) == "false":
		d.i += 5
		return false
	}
	d.ok = false
	return false
}

// raw reads any JSON value but null, checking it as encoding/json would,
// and returns its span. It checks as it goes rather than find the end
// with jsonscan.ValueEnd and then call json.Valid, as the put's fast
// path does for its one value: a page has thousands, and that would run
// each through encoding/json's scanner a second time.
func (d *kvPageDecoder) raw() [2]int {
	start := d.i
	if d.peek() == 'n' {
		d.ok = false // null: encoding/json's rules for it are its own
		return [2]int{}
	}
	d.value(0)
	return [2]int{start, d.i}
}

// maxRawDepth bounds the nesting raw follows; deeper values go to
// encoding/json, which has its own bound.
const maxRawDepth = 64

// value checks one JSON value of any kind.
func (d *kvPageDecoder) value(depth int) {
	if depth > maxRawDepth {
		d.ok = false
		return
	}
	switch c := d.peek(); {
	case c == '{':
		d.list('{', '}', func() {
			d.anyString()
			d.ws()
			d.expect(':')
			d.ws()
			d.value(depth + 1)
		})
	case c == '[':
		d.list('[', ']', func() { d.value(depth + 1) })
	case c == '"':
		d.anyString()
	case c == '-' || (c >= '0' && c <= '9'):
		d.number()
	case c == 't':
		d.literal("true")
	case c == 'f':
		d.literal("false")
	case c == 'n':
		d.literal("null")
	default:
		d.ok = false
	}
}

func (d *kvPageDecoder) literal(s string) {
	if len(d.p)-d.i < len(s) || string(d.p[d.i:d.i+len(s)]) != s {
		d.ok = false
		return
	}
	d.i += len(s)
}

// anyString checks a JSON string, escapes included. Invalid UTF-8 in a
// raw value is kept as it is by encoding/json too.
func (d *kvPageDecoder) anyString() {
	if d.peek() != '"' {
		d.ok = false
		return
	}
	for j := d.i + 1; j < len(d.p); j++ {
		switch c := d.p[j]; {
		case c == '"':
			d.i = j + 1
			return
		case c < 0x20:
			d.ok = false
			return
		case c == '\\':
			j++
			if j >= len(d.p) {
				d.ok = false
				return
			}
			switch d.p[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(d.p)-j < 5 || !isHex4(d.p[j+1:j+5]) {
					d.ok = false
					return
				}
				j += 4
			default:
				d.ok = false
				return
			}
		}
	}
	d.ok = false
}

func isHex4(p []byte) bool {
	for _, c := range p[:4] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// number checks a JSON number.
func (d *kvPageDecoder) number() {
	if d.peek() == '-' {
		d.i++
	}
	switch c := d.peek(); {
	case c == '0':
		d.i++
	case c >= '1' && c <= '9':
		d.digits()
	default:
		d.ok = false
		return
	}
	if d.peek() == '.' {
		d.i++
		if !d.digits() {
			d.ok = false
			return
		}
	}
	if c := d.peek(); c == 'e' || c == 'E' {
		d.i++
		if c := d.peek(); c == '+' || c == '-' {
			d.i++
		}
		if !d.digits() {
			d.ok = false
		}
	}
}

// digits skips one or more digits; false when there is none.
func (d *kvPageDecoder) digits() bool {
	start := d.i
	for d.i < len(d.p) && d.p[d.i] >= '0' && d.p[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}
