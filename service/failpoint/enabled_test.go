//go:build failpoints

package failpoint

import (
	"testing"

	gofail "go.etcd.io/gofail/runtime"
)

// Every point is registered with gofail, so that GOFAIL_FAILPOINTS and
// GOFAIL_HTTP can set it.
func TestEveryPointIsRegistered(t *testing.T) {
	for _, name := range Names {
		if err := gofail.Enable(name, "off"); err != nil {
			t.Fatalf("enable %s: %v", name, err)
		}
		if err := gofail.Disable(name); err != nil {
			t.Fatalf("disable %s: %v", name, err)
		}
	}
}

// A point that is not set, or whose terms do not return "kill", lets the
// caller go on; the count shows it was evaluated.
func TestInjectWithoutKillGoesOn(t *testing.T) {
	Inject(BeforeReply)
	if err := gofail.Enable(BeforeReply, `2*off->return("other")`); err != nil {
		t.Fatal(err)
	}
	defer gofail.Disable(BeforeReply)
	for i := 0; i < 3; i++ {
		Inject(BeforeReply)
	}
	if _, n, err := gofail.Status(BeforeReply); err != nil || n != 3 {
		t.Fatalf("evaluated %d times (%v), want 3", n, err)
	}
}

func TestUnknownPointPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Inject of an unknown point did not panic")
		}
	}()
	Inject("noSuchPoint")
}
