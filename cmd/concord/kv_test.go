package main

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"testing"

	"github.com/concord-io/concord/schema"
)

// kv get and kv del name KEY (with --prefix or not) or a range (--from,
// --to or not); every other combination is a usage error before anything
// is sent.
func TestSelectKeys(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		start, end string // "-": none
		usage      bool
	}{
		{args: []string{"k"}, start: "-", end: "-"},
		{args: []string{"k", "--prefix"}, start: "-", end: "-"},
		{args: []string{"--from", "a"}, start: "a", end: "-"},
		{args: []string{"--from", "a", "--to", "b"}, start: "a", end: "b"},
		{args: []string{"--from", "", "--to", "b"}, start: "", end: "b"},
		{args: []string{"--from", "b", "--to", "a"}, start: "b", end: "a"}, // the server refuses it, with its words
		{args: []string{"--to", "b"}, usage: true},
		{args: []string{"k", "--from", "a"}, usage: true},
		{args: []string{"--prefix", "--from", "a"}, usage: true},
		{args: []string{}, usage: true},
		{args: []string{"--prefix"}, usage: true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.Bool("prefix", false, "")
		from, to := fs.String("from", "", ""), fs.String("to", "", "")
		pos, err := parseArgs(fs, tc.args, 0, 1)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		sel, err := selectKeys(fs, pos, *from, *to)
		var ue usageError
		if tc.usage {
			if !errors.As(err, &ue) {
				t.Errorf("%q: %v, want a usage error", tc.args, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		str := func(p *string) string {
			if p == nil {
				return "-"
			}
			return *p
		}
		if str(sel.rangeStart) != tc.start || str(sel.rangeEnd) != tc.end {
			t.Errorf("%q: range %s..%s, want %s..%s", tc.args, str(sel.rangeStart), str(sel.rangeEnd), tc.start, tc.end)
		}
	}
}

// A record or event with a content type and metadata shows them; one
// without stays exactly as before. A content type with a space or a quote
// is quoted in an event line, where it would otherwise end its field.
func TestRecordAndEventText(t *testing.T) {
	plain := schema.KeyValue{Key: "a.b", Value: json.RawMessage(`1`)}
	if got := recordText(plain, "  "); got != "a.b 1" {
		t.Errorf("plain record: %q", got)
	}
	full := schema.KeyValue{Key: "a.b", Value: json.RawMessage(`1`), ContentType: "text/plain; charset=utf-8", Metadata: json.RawMessage(`{"o":"x"}`)}
	if got := recordText(full, "  "); got != "a.b 1\n  content_type: text/plain; charset=utf-8\n  metadata: {\"o\":\"x\"}" {
		t.Errorf("record with both: %q", got)
	}
	keysOnly := schema.KeyValue{Key: "a.b", Metadata: json.RawMessage(`{}`)}
	if got := recordText(keysOnly, "    "); got != "a.b\n    metadata: {}" {
		t.Errorf("record without a value: %q", got)
	}
	e := schema.Event{Type: schema.EventPut, Key: "a.b", Value: json.RawMessage(`1`), Revision: 3, Cause: schema.CausePut}
	if got := eventText(e); got != "revision=3 op_index=0 type=put key=a.b cause=put value=1" {
		t.Errorf("plain event: %q", got)
	}
	for ct, want := range map[string]string{
		"application/json":          "content_type=application/json",
		"text/plain; charset=utf-8": `content_type="text/plain; charset=utf-8"`,
		`a"b`:                       `content_type="a\"b"`,
	} {
		e.ContentType, e.Metadata = ct, json.RawMessage(`{"o":1}`)
		if got := eventText(e); got != "revision=3 op_index=0 type=put key=a.b cause=put "+want+` metadata={"o":1} value=1` {
			t.Errorf("event with content type %q: %q", ct, got)
		}
	}
}

// A VALUE is JSON when it parses; other text is a string, except text
// that starts like JSON and does not parse, which is a usage error (it
// was stored as the string "{\"a\":" before) unless --string asks for a
// string.
func TestJSONValue(t *testing.T) {
	for _, tc := range []struct {
		in       string
		asString bool
		want     string // "" for a usage error
	}{
		{in: `{"a":1}`, want: `{"a":1}`},
		{in: "{\"a\":1}\n", want: "{\"a\":1}\n"},
		{in: `42`, want: `42`},
		{in: `hello`, want: `"hello"`},
		{in: `tru`, want: `"tru"`},
		{in: `{"a":`},
		{in: `  [1,`},
		{in: `"open`},
		{in: `{"a":`, asString: true, want: `"{\"a\":"`},
		{in: `{"a":1}`, asString: true, want: `"{\"a\":1}"`},
		{in: "\xff"},
	} {
		got, err := jsonValue(tc.in, tc.asString, "give --string")
		if tc.want == "" {
			var u usageError
			if !errors.As(err, &u) {
				t.Fatalf("%q: %s, %v; want a usage error", tc.in, got, err)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Fatalf("%q (string %v): %s, %v; want %s", tc.in, tc.asString, got, err, tc.want)
		}
	}
}
