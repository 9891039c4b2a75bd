package fsm

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strconv"
	"strings"
)

// compareJSON compares two JSON documents by meaning, not bytes: object
// member order and number spelling (1, 1.0, 1e0) do not matter. == and !=
// apply to any documents; the ordering operators compare two numbers
// numerically or two strings bytewise, and are false for anything else.
func compareJSON(op CompareOp, a, b json.RawMessage) bool {
	va, okA := decodeJSON(a)
	vb, okB := decodeJSON(b)
	if !okA || !okB {
		return false
	}
	switch op {
	case CmpEq:
		return jsonEqual(va, vb)
	case CmpNe:
		return !jsonEqual(va, vb)
	}
	var c int
	switch x := va.(type) {
	case json.Number:
		y, ok := vb.(json.Number)
		if !ok {
			return false
		}
		c = compareNumbers(x, y)
	case string:
		y, ok := vb.(string)
		if !ok {
			return false
		}
		c = strings.Compare(x, y)
	default:
		return false
	}
	switch op {
	case CmpLt:
		return c < 0
	case CmpLe:
		return c <= 0
	case CmpGt:
		return c > 0
	case CmpGe:
		return c >= 0
	}
	return false
}

func decodeJSON(b json.RawMessage) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

// compareNumbers compares two JSON numbers exactly, from their text, in
// time linear in its length: materialising 1e999999 would take seconds.
// Exponents beyond ±2^62 saturate.
func compareNumbers(a, b json.Number) int {
	x, y := parseDecimal(string(a)), parseDecimal(string(b))
	if x.sign != y.sign {
		return cmp.Compare(x.sign, y.sign)
	}
	if x.sign == 0 {
		return 0
	}
	c := cmp.Compare(x.exp, y.exp)
	if c == 0 {
		c = strings.Compare(x.digits, y.digits)
	}
	return c * x.sign
}

// decimal is sign × 0.digits × 10^exp, digits without leading or trailing
// zeros; zero has sign 0.
type decimal struct {
	sign   int
	digits string
	exp    int64
}

// parseDecimal reads a JSON number (the decoder has checked its syntax).
func parseDecimal(s string) decimal {
	d := decimal{sign: 1}
	if strings.HasPrefix(s, "-") {
		d.sign, s = -1, s[1:]
	}
	mant, expText, _ := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	all := intPart + frac
	lead := len(all) - len(strings.TrimLeft(all, "0"))
	all = strings.TrimRight(all[lead:], "0")
	if all == "" {
		return decimal{}
	}
	d.digits = all
	d.exp = satAdd(parseExp(expText), int64(len(intPart)-lead))
	return d
}

const expLimit = 1 << 62

func parseExp(s string) int64 {
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if n > expLimit/10 {
			n = expLimit
			break
		}
		n = n*10 + int64(s[i]-'0')
	}
	n = min(n, expLimit)
	if neg {
		return -n
	}
	return n
}

func satAdd(a, b int64) int64 {
	return max(-expLimit, min(expLimit, a+b))
}

func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		return ok && compareNumbers(x, y) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !jsonEqual(xv, yv) {
				return false
			}
		}
		return true
	}
	return false
}

// jsonPointer returns the part of doc that an RFC 6901 pointer names, or
// null when it names nothing.
func jsonPointer(doc json.RawMessage, pointer string) json.RawMessage {
	if pointer == "" {
		return doc
	}
	v, ok := decodeJSON(doc)
	if !ok || pointer[0] != '/' {
		return json.RawMessage("null")
	}
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[tok]
			if !ok {
				return json.RawMessage("null")
			}
			v = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || !allDigits(tok) || i >= len(x) || (len(tok) > 1 && tok[0] == '0') {
				return json.RawMessage("null")
			}
			v = x[i]
		default:
			return json.RawMessage("null")
		}
	}
	out, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return out
}

// ValidJSONPointer reports whether p is a well-formed RFC 6901 pointer.
func ValidJSONPointer(p string) bool {
	if p == "" {
		return true
	}
	if p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 >= len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
