// Package jsonscan holds the scanning steps of the fast paths that decode
// the hottest requests (service) and replies (schema) without
// encoding/json: each reads one token of a JSON text at an index and
// reports where it ends, or false for anything it does not take, which the
// caller then hands to encoding/json.
package jsonscan

import "strings"

// SkipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func SkipSpace(data []byte, i int) int {
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

// String reads a JSON string at data[i] made of printable ASCII
// without escapes (so its bytes are its value) and returns its contents
// and the index after its closing quote.
func String(data []byte, i int) ([]byte, int, bool) {
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

// Int reads -?(0|[1-9][0-9]{0,17}) at data[i], not followed by a
// fraction or an exponent.
func Int(data []byte, i int) (int64, int, bool) {
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

// ValueEnd returns the index just past the JSON value that starts at
// data[i], following strings and nesting only: whether the bytes are valid
// JSON is json.Valid's to say.
func ValueEnd(data []byte, i int) (int, bool) {
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
