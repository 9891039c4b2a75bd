//go:build !failpoints

package failpoint

import "testing"

// Without the tag, even an unknown point is nothing: the calls compile
// away.
func TestWithoutTheTagNothingHappens(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled without the failpoints tag")
	}
	Inject("noSuchPoint")
	for _, name := range Names {
		Inject(name)
	}
}
