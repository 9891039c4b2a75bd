package client_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/concord-io/concord/client"
	"github.com/concord-io/concord/schema"
)

// wireSentinels are the exported sentinels of error replies, by variable
// name. TestSentinelsAreDeclaredHere checks that it lists every variable
// the package declares with client.Sentinel.
var wireSentinels = map[string]error{
	"ErrInvalidRequest":      client.ErrInvalidRequest,
	"ErrLeaseNotFound":       client.ErrLeaseNotFound,
	"ErrLeaseExists":         client.ErrLeaseExists,
	"ErrLeaseConflict":       client.ErrLeaseConflict,
	"ErrIdempotencyConflict": client.ErrIdempotencyConflict,
	"ErrNodeNotFound":        client.ErrNodeNotFound,
	"ErrClusterMismatch":     client.ErrClusterMismatch,
	"ErrCompacted":           client.ErrCompacted,
	"ErrTooLarge":            client.ErrTooLarge,
	"ErrLimitExceeded":       client.ErrLimitExceeded,
	"ErrNotLeader":           client.ErrNotLeader,
	"ErrUnavailable":         client.ErrUnavailable,
	"ErrInternal":            client.ErrInternal,
	"ErrOutcomeUnknown":      client.ErrOutcomeUnknown,
	"ErrDiskFull":            client.ErrDiskFull,
	"ErrForbidden":           client.ErrForbidden,
	"ErrBackupNotFound":      client.ErrBackupNotFound,
}

// Every row of schema.ErrorTable has exactly one exported sentinel, which an
// *Error of that name matches (wrapped too), and every sentinel belongs to
// exactly one row.
func TestEveryErrorNameHasOneSentinel(t *testing.T) {
	for _, spec := range schema.ErrorTable {
		reply := &client.Error{Code: spec.Code, Name: spec.Name, Description: "d"}
		var matched []string
		for v, s := range wireSentinels {
			if errors.Is(reply, s) {
				matched = append(matched, v)
				if !errors.Is(fmt.Errorf("call: %w", reply), s) {
					t.Errorf("a wrapped %s does not match %s", spec.Name, v)
				}
			}
		}
		if len(matched) != 1 {
			t.Errorf("an *Error named %s matches %v, want one exported sentinel", spec.Name, matched)
			continue
		}
		if s := client.Sentinel(spec.Name); s != wireSentinels[matched[0]] {
			t.Errorf("Sentinel(%q) = %v, not %s", spec.Name, s, matched[0])
		}
	}
	for v, s := range wireSentinels {
		if s == nil {
			t.Errorf("%s is nil: its name is not in schema.ErrorTable", v)
			continue
		}
		n := 0
		for _, spec := range schema.ErrorTable {
			if errors.Is(&client.Error{Name: spec.Name}, s) {
				n++
				if s.Error() != spec.Name {
					t.Errorf("%s reads %q, want the name %q", v, s.Error(), spec.Name)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s matches %d error names, want 1", v, n)
		}
	}
	if client.Sentinel("teapot") != nil {
		t.Error("Sentinel of a name outside the table is not nil")
	}
	// A name this client does not know, and the client's own errors, match
	// no reply's sentinel.
	unknown := &client.Error{Code: 418, Name: "teapot"}
	for v, s := range wireSentinels {
		if errors.Is(unknown, s) {
			t.Errorf("an unknown error name matches %s", v)
		}
	}
	for _, own := range []error{client.ErrSessionExpired, client.ErrSessionClosed, client.ErrPermissionDenied, client.ErrBackupCorrupt, client.ErrNoLeader} {
		for _, spec := range schema.ErrorTable {
			if errors.Is(&client.Error{Name: spec.Name}, own) {
				t.Errorf("an *Error named %s matches %v", spec.Name, own)
			}
		}
	}
}

// wireSentinels above names every package-level variable of the client that
// is made by Sentinel, so the test before covers them all.
func TestSentinelsAreDeclaredHere(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, v := range vs.Values {
					if call, ok := v.(*ast.CallExpr); ok {
						if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "Sentinel" {
							declared = append(declared, vs.Names[i].Name)
						}
					}
				}
			}
		}
	}
	var listed []string
	for v := range wireSentinels {
		listed = append(listed, v)
	}
	slices.Sort(declared)
	slices.Sort(listed)
	if !slices.Equal(declared, listed) {
		t.Errorf("the package declares %v with Sentinel; the test lists %v", declared, listed)
	}
}
