package tests

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// ARCHITECTURE.md is the map of the code; a map that names files which
// moved away, or leaves out a package, misleads the next reader. Every
// path it names in backquotes must exist, and every Go package of the
// repository (tests and tools aside) must have its row in the package
// table.
func TestArchitectureNamesRealPaths(t *testing.T) {
	root := ".."
	doc, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)

	// A path: a name with a '/' or ending in .go or .md, inside backquotes.
	pathRE := regexp.MustCompile("`([A-Za-z0-9_./-]+(?:/|\\.go|\\.md|\\.golden|\\.conf))`")
	named := 0
	for _, m := range pathRE.FindAllStringSubmatch(text, -1) {
		p := m[1]
		if strings.ContainsAny(p, "<>") {
			continue
		}
		named++
		if pathExists(filepath.Join(root, p)) {
			continue
		}
		// A bare file name in a file table belongs to service/.
		if !strings.Contains(strings.TrimSuffix(p, "/"), "/") && pathExists(filepath.Join(root, "service", p)) {
			continue
		}
		t.Errorf("ARCHITECTURE.md names %s, which does not exist", p)
	}
	if named < 20 {
		t.Fatalf("found only %d paths in ARCHITECTURE.md; the pattern no longer matches how it names them", named)
	}

	// Every package directory with non-test Go files has a row.
	pkgs := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", d.Name() == "bin",
				rel == "tests", strings.HasPrefix(rel, "tests"+string(filepath.Separator)), rel == "deploy":
				// tests/ has one row for all of it; deploy/ is not Go.
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		pkgs[filepath.ToSlash(filepath.Dir(rel))] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 8 {
		t.Fatalf("found only %d packages: %v", len(pkgs), pkgs)
	}
	for dir := range pkgs {
		if !strings.Contains(text, "| `"+dir+"`") && !strings.Contains(text, "| `"+dir+"/`") {
			t.Errorf("package %s has no row in ARCHITECTURE.md's package table", dir)
		}
	}
}

func pathExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// The failpoints (service/failpoint) exist only in a binary built with the
// failpoints tag: the binary every other test runs, which is the one
// users get, links no gofail code, and a tagged build does.
func TestFailpointsOnlyInTheTaggedBuild(t *testing.T) {
	const gofail = "go.etcd.io/gofail"
	out, err := newProc(t, time.Minute, "go", "version", "-m", binPath).combinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v: %s", err, out)
	}
	if strings.Contains(string(out), gofail) {
		t.Fatalf("the normal binary links %s:\n%s", gofail, out)
	}
	tagged := filepath.Join(t.TempDir(), "concord-failpoints")
	if out, err := newProc(t, 5*time.Minute, "go", "build", "-tags", "failpoints", "-o", tagged, "../cmd/concord").combinedOutput(); err != nil {
		t.Fatalf("build with -tags failpoints: %v: %s", err, out)
	}
	out, err = newProc(t, time.Minute, "go", "version", "-m", tagged).combinedOutput()
	if err != nil || !strings.Contains(string(out), gofail) {
		t.Fatalf("the failpoints build does not link %s (%v):\n%s", gofail, err, out)
	}
}

// go test -fuzz on a package without the named target only warns and
// exits 0, so a fuzz target left behind when its code moves would stop
// being fuzzed without anyone noticing: every target the Makefile names
// must be defined in the package it names.
func TestMakefileFuzzTargetsExist(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^FUZZ_TARGETS :=(.*)$`).FindSubmatch(mk)
	if line == nil {
		t.Fatal("the Makefile has no FUZZ_TARGETS line")
	}
	targets := strings.Fields(string(line[1]))
	if len(targets) < 4 {
		t.Fatalf("FUZZ_TARGETS names only %d targets: %q", len(targets), targets)
	}
	for _, target := range targets {
		pkg, name, ok := strings.Cut(target, ":")
		if !ok {
			t.Errorf("FUZZ_TARGETS entry %q is not <package>:<target>", target)
			continue
		}
		files, _ := filepath.Glob(filepath.Join("..", pkg, "*_test.go"))
		found := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "\nfunc "+name+"(f *testing.F)") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("FUZZ_TARGETS names %s in %s, which defines no such fuzz target", name, pkg)
		}
	}
}

// The packages split out of service/ see the node only through interfaces
// they declare: none imports service/ itself, and each imports only the
// service packages ARCHITECTURE.md's import table (after the
// "<!-- service-imports -->" marker) gives it. A new import across the
// split is a decision to write down there, not one to slip in.
func TestServicePackagesImportDownwards(t *testing.T) {
	const mod = "github.com/concord-io/concord/"
	doc, err := os.ReadFile(filepath.Join("..", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, found := strings.Cut(string(doc), "<!-- service-imports -->")
	if !found {
		t.Fatal("ARCHITECTURE.md has no <!-- service-imports --> table")
	}
	allowed := map[string][]string{}
	cell := regexp.MustCompile("`([a-z/]+)`")
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if !strings.HasPrefix(line, "|") {
			break // the table ends at the first line that is not a row
		}
		cols := strings.Split(line, "|")
		if len(cols) < 3 || !strings.Contains(cols[1], "`") {
			continue // the header and its rule
		}
		pkg := cell.FindStringSubmatch(cols[1])[1]
		allowed[pkg] = []string{}
		for _, m := range cell.FindAllStringSubmatch(cols[2], -1) {
			allowed[pkg] = append(allowed[pkg], m[1])
		}
	}
	if len(allowed) < 6 {
		t.Fatalf("ARCHITECTURE.md's import table names %d packages: %v", len(allowed), allowed)
	}
	for pkg, ok := range allowed {
		files, _ := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		seen := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			seen++
			for _, imp := range parsed.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				rel, ours := strings.CutPrefix(path, mod)
				if !ours || !strings.HasPrefix(rel, "service") {
					continue
				}
				if !slices.Contains(ok, rel) {
					t.Errorf("%s imports %s; it may import only %v of the service packages", f, rel, ok)
				}
			}
		}
		if seen == 0 {
			t.Errorf("%s has no Go files: the table names a package that moved", pkg)
		}
	}
}

// ARCHITECTURE.md's file tables are the map of the node's own code and of
// its request server: each file of service/ and of service/serving has a
// row (service/ files by name, the others by path), so a new file, or a
// renamed one, is put on the map.
func TestArchitectureTablesNameEveryFile(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"service", "service/serving"} {
		files, _ := filepath.Glob(filepath.Join("..", dir, "*.go"))
		if len(files) < 5 {
			t.Fatalf("%s holds only %d Go files", dir, len(files))
		}
		for _, f := range files {
			name := filepath.Base(f)
			if strings.HasSuffix(name, "_test.go") || name == "doc.go" {
				continue
			}
			want := "`" + dir + "/" + name + "`"
			if dir == "service" && strings.Contains(string(doc), "`"+name+"`") {
				continue
			}
			if !strings.Contains(string(doc), want) {
				t.Errorf("ARCHITECTURE.md has no row for %s/%s", dir, name)
			}
		}
	}
}
