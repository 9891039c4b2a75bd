package linearize

import (
	"strings"
	"testing"
	"time"
)

// The checker must be able to fail: each history below is built by hand
// with the verdict it must get.
func TestCheckVerdicts(t *testing.T) {
	type op struct {
		in        Input
		call, ret int64
		out       Output
	}
	cases := []struct {
		name    string
		ops     []op
		refused []Input
		legal   bool
	}{
		{"sequential put then get", []op{
			{Input{Op: Put, Key: "a", Value: "1"}, 0, 1, Output{}},
			{Input{Op: Get, Key: "a"}, 2, 3, Output{Value: "1"}},
		}, nil, true},
		{"a read of a value never written", []op{
			{Input{Op: Put, Key: "a", Value: "1"}, 0, 1, Output{}},
			{Input{Op: Get, Key: "a"}, 2, 3, Output{Value: "2"}},
		}, nil, false},
		{"a stale read after an acknowledged put", []op{
			{Input{Op: Put, Key: "a", Value: "1"}, 0, 1, Output{}},
			{Input{Op: Put, Key: "a", Value: "2"}, 2, 3, Output{}},
			{Input{Op: Get, Key: "a"}, 4, 5, Output{Value: "1"}},
		}, nil, false},
		{"an unknown put seen later", []op{
			{Input{Op: Put, Key: "a", Value: "1"}, 0, 0, Output{Unknown: true}},
			{Input{Op: Get, Key: "a"}, 4, 5, Output{Value: "1"}},
		}, nil, true},
		{"an unknown put never seen", []op{
			{Input{Op: Put, Key: "a", Value: "1"}, 0, 0, Output{Unknown: true}},
			{Input{Op: Get, Key: "a"}, 4, 5, Output{Value: ""}},
		}, nil, true},
		{"a refused put seen later", []op{
			{Input{Op: Get, Key: "a"}, 4, 5, Output{Value: "1"}},
		}, []Input{{Op: Put, Key: "a", Value: "1"}}, false},
		{"a cas that swapped on the wrong value", []op{
			{Input{Op: Put, Key: "a", Value: "1"}, 0, 1, Output{}},
			{Input{Op: CAS, Key: "a", Expect: "0", Value: "2"}, 2, 3, Output{Swapped: true}},
		}, nil, false},
	}
	for _, c := range cases {
		h := New()
		for i, o := range c.ops {
			h.ops = append(h.ops, opOf(i, o.in, o.call, o.ret, o.out))
		}
		for _, in := range c.refused {
			h.Refused(in, "503")
		}
		err := h.Check(10*time.Second, "")
		if (err == nil) != c.legal {
			t.Errorf("%s: Check = %v, want legal=%v", c.name, err, c.legal)
		}
	}
}

func TestAppliedRefusals(t *testing.T) {
	h := New()
	h.Refused(Input{Op: Put, Key: "a", Value: "v7"}, "503 nothing changed")
	got := h.AppliedRefusals([]string{"v1", "v7"})
	if len(got) != 1 || !strings.Contains(got[0], "v7") {
		t.Fatalf("AppliedRefusals = %q", got)
	}
}
