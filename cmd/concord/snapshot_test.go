package main

import (
	"go/parser"
	"go/token"
	"strconv"
	"testing"
)

// `concord snapshot` reads, writes and restores backup files with the
// client and package backupfile alone; the node stays out of its code.
func TestSnapshotCommandDoesNotImportTheNode(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "snapshot.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		seen[p] = true
		if p == "github.com/concord-io/concord/service" {
			t.Errorf("snapshot.go imports %s", p)
		}
	}
	if !seen["github.com/concord-io/concord/service/backupfile"] {
		t.Errorf("snapshot.go does not import backupfile: %v", seen)
	}
}
