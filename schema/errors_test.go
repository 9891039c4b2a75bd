package schema

import "testing"

// Each name is in the table once, LookupError finds it, and its class says
// retryable exactly when its code does.
func TestErrorTableRows(t *testing.T) {
	seen := map[string]bool{}
	for _, spec := range ErrorTable {
		if seen[spec.Name] {
			t.Errorf("%s appears twice", spec.Name)
		}
		seen[spec.Name] = true
		got, ok := LookupError(spec.Name)
		if !ok || got != spec {
			t.Errorf("LookupError(%q) = %+v, %v, want %+v", spec.Name, got, ok, spec)
		}
		if spec.Meaning == "" {
			t.Errorf("%s has no meaning", spec.Name)
		}
		e := Errorf(spec.Name, "d %d", 1)
		if e.Code != spec.Code || e.Name != spec.Name || e.Description != "d 1" {
			t.Errorf("Errorf(%s) = %+v", spec.Name, e)
		}
		if spec.Retryable() != (spec.Code == 503 || spec.Code == 504) || e.Retryable() != spec.Retryable() {
			t.Errorf("%s (%d, class %d): spec retryable %v, reply retryable %v", spec.Name, spec.Code, spec.Class, spec.Retryable(), e.Retryable())
		}
	}
	if _, ok := LookupError("teapot"); ok {
		t.Error("LookupError found a name that is not in the table")
	}
	if e := Errorf("teapot", "short and stout"); e.Name != ErrInternal || e.Code != 500 || e.Description != "short and stout" {
		t.Errorf("Errorf of an unknown name = %+v, want internal (500)", e)
	}
}
