package jsonscan

import "testing"

func TestSkipSpace(t *testing.T) {
	for _, c := range []struct {
		in   string
		i    int
		want int
	}{{"", 0, 0}, {" \t\r\nx", 0, 4}, {"x ", 0, 0}, {"a  ", 1, 3}} {
		if got := SkipSpace([]byte(c.in), c.i); got != c.want {
			t.Errorf("SkipSpace(%q, %d) = %d, want %d", c.in, c.i, got, c.want)
		}
	}
}

func TestString(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		next int
		ok   bool
	}{
		{`"abc" `, "abc", 5, true}, {`""`, "", 2, true}, {`"a~ "`, "a~ ", 5, true},
		{`abc`, "", 0, false}, {`"abc`, "", 0, false}, {`"a\"b"`, "", 0, false},
		{"\"a\x01\"", "", 0, false}, {"\"a\x7f\"", "", 0, false}, {"\"é\"", "", 0, false},
	} {
		got, next, ok := String([]byte(c.in), 0)
		if ok != c.ok || (ok && (string(got) != c.want || next != c.next)) {
			t.Errorf("String(%q) = %q, %d, %v; want %q, %d, %v", c.in, got, next, ok, c.want, c.next, c.ok)
		}
	}
}

func TestInt(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		next int
		ok   bool
	}{
		{"0", 0, 1, true}, {"-0", 0, 2, true}, {"42,", 42, 2, true}, {"-7}", -7, 2, true},
		{"999999999999999999", 999999999999999999, 18, true},
		{"1000000000000000000", 0, 0, false}, {"01", 0, 0, false}, {"-", 0, 0, false}, {"", 0, 0, false},
		{"1.5", 0, 0, false}, {"1e3", 0, 0, false}, {"1E3", 0, 0, false}, {"x", 0, 0, false},
	} {
		got, next, ok := Int([]byte(c.in), 0)
		if ok != c.ok || (ok && (got != c.want || next != c.next)) {
			t.Errorf("Int(%q) = %d, %d, %v; want %d, %d, %v", c.in, got, next, ok, c.want, c.next, c.ok)
		}
	}
}

func TestValueEnd(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{
		{`1,`, 1, true}, {`"a,b"}`, 5, true}, {`"a\"b" `, 6, true}, {`{"a":[1,2]},`, 11, true},
		{`[[]]]`, 4, true}, {`true}`, 4, true}, {`"abc`, 0, false}, {`{"a":1`, 0, false}, {`]`, 0, false},
	} {
		got, ok := ValueEnd([]byte(c.in), 0)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("ValueEnd(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
