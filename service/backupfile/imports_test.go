package backupfile

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The offline tools must not link the node: `concord snapshot` reads and
// restores files without it.
func TestDoesNotImportTheNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 {
		t.Fatalf("go list listed %q", deps)
	}
	for _, p := range deps {
		if p == "github.com/concord-io/concord/service" {
			t.Fatalf("backupfile imports the node (package service): %v", deps)
		}
	}
}
