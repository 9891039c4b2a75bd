package service

// The two requests every lease holder sends all day, keep-alive
// {"id":N} and grant {"ttl":N}, are decoded here without encoding/json:
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
		// -?(0|[1-9][0-9]{0,17})
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
			return out, false
		}
		if i < len(data) && (data[i] == '.' || data[i] == 'e' || data[i] == 'E') {
			return out, false
		}
		if neg {
			v = -v
		}
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
