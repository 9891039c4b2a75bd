package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/concord-io/concord/schema"
)

// Descriptions of a body that encoding/json refused. Its own messages name
// Go types and struct fields ("cannot unmarshal string into Go struct field
// KVPutRequest.ttl of type int64"), which mean nothing to a client in
// another language, and give no index inside arrays. So on that error path
// (never on the success path) the body is walked again next to the Go type
// it was decoded into, and the first value encoding/json refused is
// described by its JSON path and in JSON's own words: "ttl must be a whole
// number of seconds, not the string \"10s\"".

// describeJSONError explains err, which the strict decoder returned for
// data decoded into v; data is the body after its first skip bytes of
// white space.
func describeJSONError(data []byte, skip int, v any, err error) *schema.Error {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return Invalid("the request body is not valid JSON: %s (at byte %d)", syn.Error(), int64(skip)+syn.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return Invalid("the request body is not valid JSON: it ends before the object is complete")
	}
	if e := findRefusedValue(data, reflect.TypeOf(v)); e != nil {
		return e
	}
	// The walk did not find what encoding/json refused (it should): say
	// what can be said without Go's vocabulary.
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) && typ.Field != "" {
		return Invalid("%s must be %s", typ.Field, wantedKind(typ.Type, typ.Field))
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return Invalid("unknown field %s", name)
	}
	return Invalid("the request body could not be read: %s", strings.TrimPrefix(err.Error(), "json: "))
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// findRefusedValue walks data next to t, as encoding/json with
// DisallowUnknownFields decodes it, and describes the first value it would
// refuse: an unknown field, or a value of the wrong kind. It returns nil if
// it finds none.
func findRefusedValue(data []byte, t reflect.Type) *schema.Error {
	w := &jsonWalker{dec: json.NewDecoder(bytes.NewReader(data))}
	w.dec.UseNumber()
	e, err := w.value(t, "")
	if err != nil {
		return nil
	}
	return e
}

type jsonWalker struct {
	dec *json.Decoder
}

// value reads the next value, which encoding/json would store in a t at
// path, and describes the first part of it that does not fit. err is a
// token error, which valid JSON does not have.
func (w *jsonWalker) value(t reflect.Type, path string) (*schema.Error, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, err
	}
	if tok == nil { // null fits everything: encoding/json leaves the field as it is
		return nil, nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil, w.skip(tok)
	}
	switch t.Kind() {
	case reflect.Struct:
		if tok != json.Delim('{') {
			return wrongKind(path, t, tok), nil
		}
		return w.object(path, func(name string) (string, reflect.Type, bool) {
			f, ok := structField(t, name)
			return f.Name, f.Type, ok
		}, func(name string) *schema.Error {
			return unknownField(path, name, t)
		})
	case reflect.Map:
		if tok != json.Delim('{') {
			return wrongKind(path, t, tok), nil
		}
		return w.object(path, func(name string) (string, reflect.Type, bool) { return name, t.Elem(), true }, nil)
	case reflect.Slice, reflect.Array:
		if tok != json.Delim('[') {
			return wrongKind(path, t, tok), nil
		}
		for i := 0; w.dec.More(); i++ {
			if e, err := w.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i)); e != nil || err != nil {
				return e, err
			}
		}
		_, err := w.dec.Token() // ]
		return nil, err
	case reflect.String:
		if _, ok := tok.(string); !ok {
			return wrongKind(path, t, tok), nil
		}
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			return wrongKind(path, t, tok), nil
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		n, ok := tok.(json.Number)
		if !ok {
			return wrongKind(path, t, tok), nil
		}
		return badNumber(path, t, string(n)), nil
	default:
		return nil, w.skip(tok)
	}
	return nil, nil
}

// object reads the members of an object whose '{' was read; field gives a
// member's name in descriptions (a struct field's own name, whatever the
// case it was sent in) and type, and unknown describes a member without
// one.
func (w *jsonWalker) object(path string, field func(string) (string, reflect.Type, bool), unknown func(string) *schema.Error) (*schema.Error, error) {
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return nil, err
		}
		sent, _ := tok.(string)
		name, ft, ok := field(sent)
		if !ok {
			return unknown(sent), nil
		}
		if e, err := w.value(ft, joinPath(path, name)); e != nil || err != nil {
			return e, err
		}
	}
	_, err := w.dec.Token() // }
	return nil, err
}

// skip reads the rest of a value whose first token was tok.
func (w *jsonWalker) skip(tok json.Token) error {
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	for depth := 1; depth > 0; {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// jsonField is a struct field as encoding/json sees it.
type jsonField struct {
	Name string
	Type reflect.Type
}

// jsonFields lists the fields encoding/json decodes into a struct of type
// t, by their JSON names, in declaration order. (The request types embed
// no structs.)
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out = append(out, jsonField{Name: name, Type: f.Type})
	}
	return out
}

// structField finds the field a member called name decodes into: the
// exact name first, then (as encoding/json does) ignoring case.
func structField(t reflect.Type, name string) (jsonField, bool) {
	fields := jsonFields(t)
	for _, f := range fields {
		if f.Name == name {
			return f, true
		}
	}
	for _, f := range fields {
		if strings.EqualFold(f.Name, name) {
			return f, true
		}
	}
	return jsonField{}, false
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// unknownField describes a member called name that the object at path
// does not have, listing the members it does have.
func unknownField(path, name string, t reflect.Type) *schema.Error {
	where := "the request"
	if path != "" {
		where = path
	}
	var names []string
	for _, f := range jsonFields(t) {
		names = append(names, f.Name)
	}
	if len(names) == 0 {
		return Invalid("unknown field %q: %s takes no fields", shorten(name), where)
	}
	return Invalid("unknown field %q: the fields of %s are %s", shorten(name), where, listWords(names))
}

// wrongKind describes a value of the wrong JSON kind (tok is its first
// token) where a t is expected.
func wrongKind(path string, t reflect.Type, tok json.Token) *schema.Error {
	var got string
	switch v := tok.(type) {
	case string:
		got = fmt.Sprintf("the string %q", shorten(v))
	case json.Number:
		got = shorten(string(v))
	case bool:
		got = strconv.FormatBool(v)
	case json.Delim:
		if v == '[' {
			got = "an array"
		} else {
			got = "an object"
		}
	}
	return Invalid("%s must be %s, not %s", fieldName(path), wantedKind(t, path), got)
}

// badNumber describes the number n where a t is expected, or returns nil
// if encoding/json takes it.
func badNumber(path string, t reflect.Type, n string) *schema.Error {
	var err error
	switch t.Kind() {
	case reflect.Float32, reflect.Float64:
		_, err = strconv.ParseFloat(n, t.Bits())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		_, err = strconv.ParseInt(n, 10, t.Bits())
	default:
		_, err = strconv.ParseUint(n, 10, t.Bits())
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, strconv.ErrRange):
		return Invalid("%s is out of range: %s", fieldName(path), shorten(n))
	case strings.ContainsAny(n, "eE") && !strings.Contains(n, "."):
		return Invalid("%s must be %s written without an exponent, not %s", fieldName(path), wantedKind(t, path), shorten(n))
	}
	return Invalid("%s must be %s, not %s", fieldName(path), wantedKind(t, path), shorten(n))
}

// wantedKind says in JSON's words what a t at path holds; integers are
// described by what the field means where the name tells.
func wantedKind(t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		switch lastName(path) {
		case "ttl":
			return "a whole number of seconds"
		case "id", "ids", "lease":
			return "a lease id (a whole number)"
		}
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a different kind of value"
}

// lastName is the last member name of a path: "ttl" of
// "success[0].put.ttl", "ids" of "ids[3]".
func lastName(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		path = path[i+1:]
	}
	if i := strings.IndexByte(path, '['); i >= 0 {
		path = path[:i]
	}
	return path
}

// fieldName names the value at path in a description.
func fieldName(path string) string {
	if path == "" {
		return "the request body"
	}
	return path
}

// shorten keeps a quoted piece of the request short in a description.
func shorten(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// listWords joins words as "a, b and c".
func listWords(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}
