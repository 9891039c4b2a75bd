package decode

import (
	"encoding/json"

	"github.com/concord-io/concord/schema"
	"github.com/concord-io/concord/schema/jsonscan"
)

// The two requests every lease holder sends all day, keep-alive
// {"id":N} and grant {"ttl":N}, and the plainest put (decodePutFast), are
// decoded here without encoding/json:
// its Decoder (needed for DisallowUnknownFields) allocated a fifth of the
// bytes a node allocated under keep-alive load. The fast path takes only
// the plainest form of such a body: an object whose members are distinct,
// lower-case names (a-z, so nothing escaped) from a fixed list, each with an integer
// value of at most 18 digits, with JSON white space around the tokens and
// nothing after the object. Anything else (another field, a string, a
// float, an exponent, a leading zero, a duplicate, an escape) returns
// false and goes through Strict, which then decides and describes
// the error; FuzzFastDecode checks that the two agree on every body the
// fast path takes.

// intFields holds what decodeIntObject found: the value of each name and
// whether it was present, in the order of the names asked for.
type intFields struct {
	val     [2]int64
	present [2]bool
}

// decodeIntObject decodes data as an object of integer members whose
// names are among names (at most two), or reports false.
func decodeIntObject(data []byte, names ...string) (intFields, bool) {
	var out intFields
	i := jsonscan.SkipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return out, false
	}
	i = jsonscan.SkipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return out, jsonscan.SkipSpace(data, i+1) == len(data)
	}
	for {
		// "name"
		if i >= len(data) || data[i] != '"' {
			return out, false
		}
		start := i + 1
		end := start
		for end < len(data) && data[end] != '"' {
			if c := data[end]; c < 'a' || c > 'z' {
				return out, false
			}
			end++
		}
		if end >= len(data) {
			return out, false
		}
		field := -1
		for k, name := range names {
			if string(data[start:end]) == name {
				field = k
			}
		}
		if field < 0 || out.present[field] {
			return out, false
		}
		i = jsonscan.SkipSpace(data, end+1)
		if i >= len(data) || data[i] != ':' {
			return out, false
		}
		i = jsonscan.SkipSpace(data, i+1)
		v, next, ok := jsonscan.Int(data, i)
		if !ok {
			return out, false
		}
		i = next
		out.val[field], out.present[field] = v, true
		i = jsonscan.SkipSpace(data, i)
		if i >= len(data) {
			return out, false
		}
		switch data[i] {
		case ',':
			i = jsonscan.SkipSpace(data, i+1)
		case '}':
			return out, jsonscan.SkipSpace(data, i+1) == len(data)
		default:
			return out, false
		}
	}
}

// decodePutFast decodes the plainest form of a put, the write every
// client sends all day, into req without encoding/json's Decoder (which
// allocated about 850 bytes a put, a sixth of what a node allocated per
// put under load): an object whose members are distinct, among "key" (a
// string of printable ASCII without escapes), "value" (any JSON value,
// checked by json.Valid), "lease" and "ttl" (integers as decodeIntObject
// takes them), with JSON white space around the tokens and nothing after
// the object. Anything else reports false, and Strict decides;
// FuzzFastDecode checks that the two agree on every body taken here.
// req.Value points into data.
func decodePutFast(data []byte, req *schema.KVPutRequest) bool {
	i := jsonscan.SkipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = jsonscan.SkipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return jsonscan.SkipSpace(data, i+1) == len(data)
	}
	var seen [4]bool // key, value, lease, ttl
	for {
		name, next, ok := jsonscan.String(data, i)
		if !ok {
			return false
		}
		i = jsonscan.SkipSpace(data, next)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = jsonscan.SkipSpace(data, i+1)
		var field int
		switch string(name) {
		case "key":
			key, next, ok := jsonscan.String(data, i)
			if !ok {
				return false
			}
			req.Key, i, field = string(key), next, 0
		case "value":
			end, ok := jsonscan.ValueEnd(data, i)
			if !ok || !json.Valid(data[i:end]) {
				return false
			}
			req.Value, i, field = json.RawMessage(data[i:end:end]), end, 1
		case "lease", "ttl":
			v, next, ok := jsonscan.Int(data, i)
			if !ok {
				return false
			}
			if name[0] == 'l' {
				req.Lease, field = &v, 2
			} else {
				req.TTL, field = &v, 3
			}
			i = next
		default:
			return false
		}
		if seen[field] {
			return false
		}
		seen[field] = true
		i = jsonscan.SkipSpace(data, i)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = jsonscan.SkipSpace(data, i+1)
		case '}':
			return jsonscan.SkipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}
