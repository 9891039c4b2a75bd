package fsm

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/concord-io/concord/schema"
)

// wantWireName is the error reply of every sentinel, by variable name.
// TestEverySentinelHasAWireName checks it lists every Err variable of the
// package.
var wantWireName = map[string]struct {
	err  error
	name string
}{
	"ErrLeaseNotFound":       {ErrLeaseNotFound, schema.ErrLeaseNotFound},
	"ErrLeaseExists":         {ErrLeaseExists, schema.ErrLeaseExists},
	"ErrLeaseConflict":       {ErrLeaseConflict, schema.ErrLeaseConflict},
	"ErrLimitExceeded":       {ErrLimitExceeded, schema.ErrLimitExceeded},
	"ErrTenantUnavailable":   {ErrTenantUnavailable, schema.ErrUnavailable},
	"ErrImportConflict":      {ErrImportConflict, schema.ErrInvalidRequest},
	"ErrTooLarge":            {ErrTooLarge, schema.ErrTooLarge},
	"ErrIdempotencyConflict": {ErrIdempotencyConflict, schema.ErrIdempotencyConflict},
	"ErrCompacted":           {ErrCompacted, schema.ErrCompacted},
	"ErrFutureRevision":      {ErrFutureRevision, schema.ErrInvalidRequest},
	"ErrBadCommand":          {ErrBadCommand, schema.ErrInternal},
	"ErrBadSnapshot":         {ErrBadSnapshot, schema.ErrInternal},
}

// Every package-level variable named Err... is a sentinel made with
// newSentinel, so it names its error reply; a new one made with errors.New
// fails here.
func TestEverySentinelHasAWireName(t *testing.T) {
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
		file, err := parser.ParseFile(fset, f, nil, 0)
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
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Err") {
						continue
					}
					declared = append(declared, n.Name)
					var call *ast.CallExpr
					if i < len(vs.Values) {
						call, _ = vs.Values[i].(*ast.CallExpr)
					}
					if id, ok := callee(call); !ok || id != "newSentinel" {
						t.Errorf("%s: %s is not made with newSentinel, so it names no error reply", fset.Position(n.Pos()), n.Name)
					}
				}
			}
		}
	}
	var listed []string
	for v := range wantWireName {
		listed = append(listed, v)
	}
	slices.Sort(declared)
	slices.Sort(listed)
	if !slices.Equal(declared, listed) {
		t.Errorf("the package declares %v; the test lists %v", declared, listed)
	}
}

func callee(call *ast.CallExpr) (string, bool) {
	if call == nil {
		return "", false
	}
	id, ok := call.Fun.(*ast.Ident)
	if !ok {
		return "", false
	}
	return id.Name, true
}

// Each sentinel gives its reply name however it is wrapped, keeps its own
// words, and an error that wraps none has no reply name.
func TestWireName(t *testing.T) {
	for v, c := range wantWireName {
		if _, ok := schema.LookupError(c.name); !ok {
			t.Errorf("%s: %q is not in schema.ErrorTable", v, c.name)
		}
		for _, err := range []error{c.err, errf(c.err, "detail"), fmt.Errorf("apply: %w", errf(c.err, "detail")), fmt.Errorf("%w: x", c.err)} {
			if got, ok := WireName(err); !ok || got != c.name {
				t.Errorf("WireName(%v) = %q, %v; want %q", err, got, ok, c.name)
			}
			if !errors.Is(err, c.err) {
				t.Errorf("%v does not match %s", err, v)
			}
		}
	}
	if ErrBadCommand.Error() != "bad command" || ErrLeaseNotFound.Error() != "lease not found" {
		t.Errorf("sentinel words changed: %q, %q", ErrBadCommand, ErrLeaseNotFound)
	}
	if got, ok := WireName(errors.New("lease not found")); ok {
		t.Errorf("a foreign error has the reply name %q", got)
	}
	if got, ok := WireName(nil); ok {
		t.Errorf("nil has the reply name %q", got)
	}
}

// A sentinel that names an error outside the table is refused when the
// package loads.
func TestNewSentinelRefusesAnUnknownName(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("newSentinel accepted a name outside schema.ErrorTable")
		}
	}()
	newSentinel("x", "teapot")
}
