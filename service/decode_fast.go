package service

import (
	"encoding/json"
	"strings"

	"github.com/concord-io/concord/schema"
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
// false and goes through decodeStrict, which then decides and describes
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
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return out, false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return out, skipSpace(data, i+1) == len(data)
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
		i = skipSpace(data, end+1)
		if i >= len(data) || data[i] != ':' {
			return out, false
		}
		i = skipSpace(data, i+1)
		v, next, ok := plainInt(data, i)
		if !ok {
			return out, false
		}
		i = next
		out.val[field], out.present[field] = v, true
		i = skipSpace(data, i)
		if i >= len(data) {
			return out, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return out, skipSpace(data, i+1) == len(data)
		default:
			return out, false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// decodePutFast decodes the plainest form of a put, the write every
// client sends all day, into req without encoding/json's Decoder (which
// allocated about 850 bytes a put, a sixth of what a node allocated per
// put under load): an object whose members are distinct, among "key" (a
// string of printable ASCII without escapes), "value" (any JSON value,
// checked by json.Valid), "lease" and "ttl" (integers as decodeIntObject
// takes them), with JSON white space around the tokens and nothing after
// the object. Anything else reports false, and decodeStrict decides;
// FuzzFastDecode checks that the two agree on every body taken here.
// req.Value points into data.
func decodePutFast(data []byte, req *schema.KVPutRequest) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	var seen [4]bool // key, value, lease, ttl
	for {
		name, next, ok := plainString(data, i)
		if !ok {
			return false
		}
		i = skipSpace(data, next)
		if i >= len(data) || data[i] != ':' {
			return false
		}
		i = skipSpace(data, i+1)
		var field int
		switch string(name) {
		case "key":
			key, next, ok := plainString(data, i)
			if !ok {
				return false
			}
			req.Key, i, field = string(key), next, 0
		case "value":
			end, ok := valueEnd(data, i)
			if !ok || !json.Valid(data[i:end]) {
				return false
			}
			req.Value, i, field = json.RawMessage(data[i:end:end]), end, 1
		case "lease", "ttl":
			v, next, ok := plainInt(data, i)
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
		i = skipSpace(data, i)
		if i >= len(data) {
			return false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return skipSpace(data, i+1) == len(data)
		default:
			return false
		}
	}
}

// plainString reads a JSON string at data[i] made of printable ASCII
// without escapes (so its bytes are its value) and returns its contents
// and the index after its closing quote.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, i, false
		}
	}
	return nil, i, false
}

// plainInt reads -?(0|[1-9][0-9]{0,17}) at data[i], not followed by a
// fraction or an exponent.
func plainInt(data []byte, i int) (int64, int, bool) {
	neg := false
	if i < len(data) && data[i] == '-' {
		neg, i = true, i+1
	}
	digits := i
	var v int64
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		v = v*10 + int64(data[i]-'0')
		i++
	}
	n := i - digits
	if n == 0 || n > 18 || n > 1 && data[digits] == '0' {
		return 0, i, false
	}
	if i < len(data) && (data[i] == '.' || data[i] == 'e' || data[i] == 'E') {
		return 0, i, false
	}
	if neg {
		v = -v
	}
	return v, i, true
}

// valueEnd returns the index just past the JSON value that starts at
// data[i], following strings and nesting only: whether the bytes are valid
// JSON is json.Valid's to say.
func valueEnd(data []byte, i int) (int, bool) {
	depth := 0
	for j := i; j < len(data); j++ {
		switch c := data[j]; c {
		case '"':
			j++
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(data) {
				return 0, false
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return 0, false
			}
		case ',', ' ', '\t', '\r', '\n':
			if depth == 0 {
				return j, j > i
			}
			continue
		}
		if depth == 0 {
			// A string, a closed object or array, or the last byte of a
			// number or literal that runs to the next delimiter.
			if c := data[j]; c == '"' || c == '}' || c == ']' {
				return j + 1, true
			}
			if j+1 < len(data) && strings.IndexByte(",} \t\r\n]", data[j+1]) >= 0 {
				return j + 1, true
			}
		}
	}
	return 0, false
}
