package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/concord-io/concord/schema"
)

// readmeBlock is a console block of README.md marked for this test.
type readmeBlock struct {
	steps []readmeStep
}

// readmeStep is a "$ command" line and the output shown under it.
type readmeStep struct {
	cmd    string
	output []string
}

// docPages are the pages whose examples these tests run: the README and
// every page of docs/.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil || len(pages) < 5 {
		t.Fatalf("docs/ holds %d pages (%v)", len(pages), err)
	}
	return append([]string{"../README.md"}, pages...)
}

// readmeBlocks returns the console blocks that follow a
// "<!-- readme-test: NAME -->" marker, by name, from the README and the
// pages of docs/; a name may be used once.
func readmeBlocks(t *testing.T) map[string]readmeBlock {
	t.Helper()
	blocks := map[string]readmeBlock{}
	for _, page := range docPages(t) {
		for name, b := range pageBlocks(t, page) {
			if _, dup := blocks[name]; dup {
				t.Fatalf("block %q is marked twice (again in %s)", name, page)
			}
			blocks[name] = b
		}
	}
	return blocks
}

// pageBlocks returns the marked console blocks of one page.
func pageBlocks(t *testing.T, page string) map[string]readmeBlock {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]readmeBlock{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var name string
	var inBlock bool
	var cur readmeBlock
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "<!-- readme-test: "):
			name = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- readme-test: "), " -->")
		case name != "" && !inBlock && strings.HasPrefix(line, "```console"):
			inBlock, cur = true, readmeBlock{}
		case inBlock && line == "```":
			blocks[name] = cur
			name, inBlock = "", false
		case inBlock && strings.HasPrefix(line, "$ "):
			cur.steps = append(cur.steps, readmeStep{cmd: strings.TrimPrefix(line, "$ ")})
		case inBlock && len(cur.steps) > 0:
			s := &cur.steps[len(cur.steps)-1]
			s.output = append(s.output, line)
		}
	}
	return blocks
}

// natsCLI finds the nats CLI; `make test` installs it into ./bin and puts
// it on PATH and sets CONCORD_REQUIRE_NATS_CLI, so CI cannot skip.
func natsCLI(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("nats"); err != nil {
		if os.Getenv("CONCORD_REQUIRE_NATS_CLI") != "" {
			t.Fatal("the nats CLI is not on PATH; run `make tools`")
		}
		t.Skip("the nats CLI is not on PATH; `make test` installs it")
	}
}

// shell prepares a README command with the nats CLI pointed at url and no
// user configuration. It is shellProc's command, for callers that run it
// with exec's own methods; shellProc's proc is the better way to run it.
func shell(t *testing.T, url, command string) *exec.Cmd {
	t.Helper()
	return shellProc(t, url, command).cmd
}

// shellProc prepares a README command with the nats CLI pointed at url and
// no user configuration, as a process of the test allowed two minutes.
func shellProc(t *testing.T, url, command string) *proc {
	t.Helper()
	home := t.TempDir()
	p := newProc(t, 2*time.Minute, "bash", "-c", command)
	p.cmd.Env = append(p.cmd.Env, "NATS_URL="+url, "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=")
	return p
}

// sameJSON compares a reply with the README's version of it. Fields whose
// value is time (remaining_ms, remaining_ttl) must be numbers no larger
// than the README shows; everything else must be equal.
func sameJSON(want, got any) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("want an object, got %v", got)
		}
		if len(g) != len(w) {
			return fmt.Errorf("want fields %v, got %v", keysOf(w), keysOf(g))
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("missing field %q", k)
			}
			if k == "remaining_ms" || k == "remaining_ttl" {
				gn, ok := gv.(float64)
				if !ok || gn < 0 || gn > wv.(float64) {
					return fmt.Errorf("%s = %v, want a number in 0..%v", k, gv, wv)
				}
				continue
			}
			if err := sameJSON(wv, gv); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("want %v, got %v", want, got)
		}
		for i := range w {
			if err := sameJSON(w[i], g[i]); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Errorf("want %v, got %v", want, got)
	}
	return nil
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func jsonLines(t *testing.T, lines []string) []any {
	t.Helper()
	var out []any
	for _, l := range lines {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("README JSON %q: %v", l, err)
		}
		out = append(out, v)
	}
	return out
}

func TestReadmeQuickstart(t *testing.T) {
	natsCLI(t)
	blocks := readmeBlocks(t)
	watch, requests := blocks["watch"], blocks["requests"]
	if len(watch.steps) != 1 || len(requests.steps) < 5 {
		t.Fatalf("README quickstart blocks not found or changed shape: watch %d steps, requests %d", len(watch.steps), len(requests.steps))
	}
	n := startNode(t, nodeOpts{})

	// The watcher runs the README's command, stopping after the events it shows.
	wantEvents := jsonLines(t, watch.steps[0].output)
	sub := shellProc(t, n.natsURL, fmt.Sprintf("%s --count=%d", watch.steps[0].cmd, len(wantEvents)))
	subOut := &lockedBuffer{}
	sub.cmd.Stdout, sub.cmd.Stderr = subOut, subOut
	if err := sub.start(); err != nil {
		t.Fatal(err)
	}
	// Wait until the CLI says it has subscribed, then give the
	// subscription a moment to reach the server.
	checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
		if !strings.Contains(subOut.String(), "Subscribing on") {
			return fmt.Errorf("nats sub not ready: %q", subOut.String())
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)

	runReadmeRequests(t, n, requests)

	// The lease expires 10 s after the keep-alive; the watcher then exits.
	select {
	case <-sub.done:
		if err := sub.wait(); err != nil {
			t.Fatalf("nats sub: %v\n%s", err, subOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the watcher did not see the README's events:\n%s", subOut.String())
	}
	var gotEvents []any
	for _, l := range strings.Split(subOut.String(), "\n") {
		if strings.HasPrefix(l, "{") {
			var v any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatal(err)
			}
			gotEvents = append(gotEvents, v)
		}
	}
	if err := sameJSON(wantEvents, gotEvents); err != nil {
		t.Fatalf("watch output differs from the README: %v\n%s", err, subOut.String())
	}
	for _, hdr := range []string{"Concord-Revision: 1", "Concord-Operation: PUT", "Concord-Revision: 2", "Concord-Operation: DEL"} {
		if !strings.Contains(subOut.String(), hdr) {
			t.Fatalf("watch output lacks header %q:\n%s", hdr, subOut.String())
		}
	}
}

// runReadmeRequests runs each "$ nats req" step of a block with the real
// CLI and compares what it prints with the README.
func runReadmeRequests(t *testing.T, n *node, block readmeBlock) {
	t.Helper()
	for _, step := range block.steps {
		want := jsonLines(t, step.output)
		if len(want) != 1 {
			t.Fatalf("README step %q shows %d JSON replies, want 1", step.cmd, len(want))
		}
		out, err := shellProc(t, n.natsURL, step.cmd).output()
		if err != nil {
			t.Fatalf("%s: %v", step.cmd, err)
		}
		var got any
		if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
			t.Fatalf("%s printed %q: %v", step.cmd, out, err)
		}
		if err := sameJSON(want[0], got); err != nil {
			t.Fatalf("%s\nREADME shows %s\ngot %s\n%v", step.cmd, step.output, out, err)
		}
	}
}

// The README's lock example: acquire, a second contender reads the
// holder, the holder's lease releases.
func TestReadmeLock(t *testing.T) {
	natsCLI(t)
	block := readmeBlocks(t)["lock"]
	if len(block.steps) != 5 {
		t.Fatalf("README lock block not found or changed shape: %d steps", len(block.steps))
	}
	runReadmeRequests(t, startNode(t, nodeOpts{}), block)
}

// The README's reads at a past revision, key history and compaction, each
// step with the real nats CLI against a new node.
func TestReadmeHistory(t *testing.T) {
	natsCLI(t)
	block := readmeBlocks(t)["history"]
	if len(block.steps) < 10 {
		t.Fatalf("README history block not found or changed shape: %d steps", len(block.steps))
	}
	for _, want := range []string{"concord.kv.get", "concord.kv.history", "concord.kv.compact"} {
		found := false
		for _, s := range block.steps {
			found = found || strings.Contains(s.cmd, want)
		}
		if !found {
			t.Fatalf("README history block has no %s request", want)
		}
	}
	runReadmeRequests(t, startNode(t, nodeOpts{}), block)
}

// readmeBlockTests are the README console blocks the tests of this file
// run, by marker name.
var readmeBlockTests = []string{"watch", "requests", "lock", "history", "ranges", "cli-history", "cli-ranges", "cluster", "cli-lock"}

// Every "<!-- readme-test: NAME -->" block of the README is one a test
// here runs: a new block without its test would show output nothing
// checks.
func TestReadmeBlocksAreAllRun(t *testing.T) {
	for name := range readmeBlocks(t) {
		if !slices.Contains(readmeBlockTests, name) {
			t.Errorf("README block %q is run by no test in tests/readme_test.go", name)
		}
	}
	for _, name := range readmeBlockTests {
		if _, ok := readmeBlocks(t)[name]; !ok {
			t.Errorf("README has no block %q", name)
		}
	}
}

// The README's key ranges and content type and metadata, each step with
// the real nats CLI against a new node.
func TestReadmeRanges(t *testing.T) {
	natsCLI(t)
	block := readmeBlocks(t)["ranges"]
	if len(block.steps) < 10 {
		t.Fatalf("README ranges block not found or changed shape: %d steps", len(block.steps))
	}
	for _, want := range []string{`"range_start"`, `"content_type"`, `"metadata"`, "concord.kv.delete", "concord.kv.changes"} {
		found := false
		for _, s := range block.steps {
			found = found || strings.Contains(s.cmd, want)
		}
		if !found {
			t.Fatalf("README ranges block has no request with %s", want)
		}
	}
	runReadmeRequests(t, startNode(t, nodeOpts{}), block)
}

// The README's CLI block about a key's past, run step by step with the
// real binary against a new node: every command succeeds and prints
// exactly what the README shows.
func TestReadmeCLIHistory(t *testing.T) {
	runReadmeCLI(t, "cli-history")
}

// The README's CLI block about key ranges, content type and metadata, run
// as TestReadmeCLIHistory runs its block.
func TestReadmeCLIRanges(t *testing.T) {
	runReadmeCLI(t, "cli-ranges")
}

// runReadmeCLI runs a README console block of concord commands step by
// step with the real binary against a new node: every command succeeds
// and prints exactly what the README shows.
func runReadmeCLI(t *testing.T, name string) {
	t.Helper()
	block := readmeBlocks(t)[name]
	if len(block.steps) < 5 {
		t.Fatalf("README %s block not found or changed shape: %d steps", name, len(block.steps))
	}
	n := startNode(t, nodeOpts{})
	for _, step := range block.steps {
		cmd := shellProc(t, n.natsURL, step.cmd)
		cmd.cmd.Env = append(cmd.cmd.Env, "PATH="+filepath.Dir(binPath)+":"+os.Getenv("PATH"))
		out, err := cmd.output()
		if err != nil {
			t.Fatalf("%s: %v (stdout %q)", step.cmd, err, out)
		}
		if got, want := strings.TrimSpace(string(out)), strings.Join(step.output, "\n"); got != want {
			t.Fatalf("%s\nREADME shows %q\ngot          %q", step.cmd, want, got)
		}
	}
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The README's failover by hand, run as one script in the repository with
// the real make and nats CLI. It uses fixed ports and ./cluster-data, so it
// skips rather than disturb a cluster a developer is running.
func TestReadmeClusterFailover(t *testing.T) {
	natsCLI(t)
	block := readmeBlocks(t)["cluster"]
	if len(block.steps) < 5 {
		t.Fatalf("README cluster block not found or changed shape: %d steps", len(block.steps))
	}
	// By hand this skips, saying why (go test -v shows it); under CI an
	// example that cannot run is a failure, not a pass.
	cannotRun := t.Skipf
	if os.Getenv("CI") != "" {
		cannotRun = t.Fatalf
	}
	if _, err := os.Stat("../cluster-data"); err == nil {
		cannotRun("the README's cluster example cannot run: ../cluster-data exists (a cluster from make cluster may be running)")
	}
	for _, port := range []int{4222, 4223, 4224, 6222, 6223, 6224, 7001, 7002, 7003, 9111, 9112, 9113} {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			cannotRun("the README's cluster example cannot run: port %d is taken, and make cluster needs it", port)
		} else {
			l.Close()
		}
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, s := range block.steps {
		script.WriteString(s.cmd + "\n")
	}
	cmd := newProc(t, 5*time.Minute, "bash", "-c", script.String())
	cmd.cmd.Dir = ".."
	home := t.TempDir()
	cmd.cmd.Env = append(cmd.cmd.Env, "HOME="+home, "XDG_CONFIG_HOME="+home, "NATS_CONTEXT=")
	// make builds with go: keep its caches where they are, not under the
	// temporary HOME that isolates the nats CLI from the user's contexts.
	for _, v := range []string{"GOPATH", "GOCACHE", "GOMODCACHE"} {
		out, err := newProc(t, time.Minute, "go", "env", v).output()
		if err != nil {
			t.Fatal(err)
		}
		cmd.cmd.Env = append(cmd.cmd.Env, v+"="+strings.TrimSpace(string(out)))
	}
	// Runs before the script's own Cleanup, which kills whatever this left.
	t.Cleanup(func() {
		stop := newProc(t, time.Minute, "make", "-s", "cluster-stop")
		stop.cmd.Dir = ".."
		_ = stop.run()
		os.RemoveAll("../cluster-data")
	})
	out, err := cmd.combinedOutput()
	if err != nil {
		t.Fatalf("README cluster script: %v\n%s", err, out)
	}
	var statuses []schema.ClusterStatusReply
	var got schema.KVGetReply
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, `{"cluster_id"`):
			var st schema.ClusterStatusReply
			mustUnmarshal(t, []byte(line), &st)
			statuses = append(statuses, st)
		case strings.HasPrefix(line, `{"revision"`) && strings.Contains(line, `"kvs"`):
			mustUnmarshal(t, []byte(line), &got)
		}
	}
	if len(statuses) != 3 || statuses[0].Leader != "n1" || statuses[1].Leader == "n1" || statuses[1].Leader == "" {
		t.Fatalf("statuses before and after the kill, and after the restart: %+v\n%s", statuses, out)
	}
	// make cluster-restart brought n1 back as a member.
	for _, m := range statuses[2].Members {
		if m.ID == "n1" && !m.Reachable {
			t.Fatalf("n1 not reachable after make cluster-restart N=1: %+v\n%s", statuses[2], out)
		}
	}
	for _, m := range statuses[1].Members {
		if m.ID == "n1" && m.Reachable {
			t.Fatalf("the killed n1 is reachable: %+v", m)
		}
	}
	if len(got.KVs) != 1 || string(got.KVs[0].Value) != `"survives"` {
		t.Fatalf("the key after the failover: %+v\n%s", got, out)
	}
}

// The README's CLI lock example, run with the real binary against a fresh
// node: the command's output is exactly what the README shows.
func TestReadmeCLILock(t *testing.T) {
	block := readmeBlocks(t)["cli-lock"]
	if len(block.steps) != 1 {
		t.Fatalf("README cli-lock block not found or changed shape: %d steps", len(block.steps))
	}
	n := startNode(t, nodeOpts{})
	cmd := shellProc(t, n.natsURL, block.steps[0].cmd)
	cmd.cmd.Env = append(cmd.cmd.Env, "PATH="+filepath.Dir(binPath)+":"+os.Getenv("PATH"))
	out, err := cmd.output()
	if err != nil {
		t.Fatalf("%s: %v", block.steps[0].cmd, err)
	}
	if got, want := strings.TrimSpace(string(out)), strings.Join(block.steps[0].output, "\n"); got != want {
		t.Fatalf("README shows %q, got %q", want, got)
	}
}

// readmeGoBlocks returns the Go blocks of the README and docs/ that
// follow a "<!-- readme-go: ExampleName -->" marker, by example name, as
// lines.
func readmeGoBlocks(t *testing.T) map[string][]string {
	t.Helper()
	blocks := map[string][]string{}
	for _, page := range docPages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for name, lines := range pageGoBlocks(string(data)) {
			if _, dup := blocks[name]; dup {
				t.Fatalf("Go block %q is marked twice (again in %s)", name, page)
			}
			blocks[name] = lines
		}
	}
	return blocks
}

// pageGoBlocks returns the marked Go blocks of one page.
func pageGoBlocks(data string) map[string][]string {
	blocks := map[string][]string{}
	var name string
	var inBlock bool
	for _, line := range strings.Split(data, "\n") {
		switch {
		case strings.HasPrefix(line, "<!-- readme-go: "):
			name = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- readme-go: "), " -->")
		case name != "" && !inBlock && line == "```go":
			inBlock = true
		case inBlock && line == "```":
			name, inBlock = "", false
		case inBlock:
			blocks[name] = append(blocks[name], line)
		}
	}
	return blocks
}

// exampleBodies returns the lines of each Example function's body in
// client/example_test.go, without their indentation.
func exampleBodies(t *testing.T) map[string][]string {
	t.Helper()
	const file = "../client/example_test.go"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string][]string{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Body == nil || !strings.HasPrefix(fn.Name.Name, "Example") {
			continue
		}
		body := src[fset.Position(fn.Body.Lbrace).Offset+1 : fset.Position(fn.Body.Rbrace).Offset]
		for _, l := range strings.Split(string(body), "\n") {
			bodies[fn.Name.Name] = append(bodies[fn.Name.Name], strings.TrimSpace(l))
		}
	}
	return bodies
}

// The README's Go blocks show the client's runnable examples: every line of
// a block is a line of its example, in the example's order (a block may
// leave lines out, such as error checks), with only the URL written out
// for the reader. The examples then run against a real node, as `go test
// ./client` runs them, and must print what their Output says.
func TestReadmeGoExamples(t *testing.T) {
	blocks := readmeGoBlocks(t)
	for _, want := range []string{"ExampleClient_GetKey", "ExampleClient_NewSession", "ExampleMutex", "ExampleElection", "ExampleClient_Watch", "ExampleClient_HistoryAll", "ExampleClient_GetRange"} {
		if len(blocks[want]) < 3 {
			t.Errorf("README has no Go block for %s (a <!-- readme-go: %s --> marker before a ```go block)", want, want)
		}
	}
	bodies := exampleBodies(t)
	var names []string
	for name, lines := range blocks {
		names = append(names, name)
		body, ok := bodies[name]
		if !ok {
			t.Errorf("README shows %s, which client/example_test.go does not have", name)
			continue
		}
		at := 0
		for _, l := range lines {
			l = strings.TrimSpace(strings.ReplaceAll(l, `"nats://127.0.0.1:4222"`, "serverURL"))
			if l == "" {
				continue
			}
			for at < len(body) && body[at] != l {
				at++
			}
			if at == len(body) {
				t.Errorf("README's %s block shows %q, which is not a line of the example after the lines before it", name, l)
				break
			}
			at++
		}
	}
	if t.Failed() {
		return
	}
	slices.Sort(names)
	// go test runs the examples in a child process: newProc ends the whole
	// group.
	p := newProc(t, 5*time.Minute, "go", "test", "-count=1", "-v", "-run", "^("+strings.Join(names, "|")+")$", "./client")
	p.cmd.Dir = ".."
	out, err := p.combinedOutput()
	if err != nil {
		t.Fatalf("go test ./client -run the README's examples: %v\n%s", err, out)
	}
	for _, name := range names {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass:\n%s", name, out)
		}
	}
}

// The README and docs/ link to each other, to sections of each other and
// to files of the repository: a link that leads nowhere (a page or file
// that moved, a heading that was renamed) fails here.
func TestDocLinksResolve(t *testing.T) {
	linkRE := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		a := map[string]bool{}
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		inBlock := false
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "```") {
				inBlock = !inBlock
			}
			if h, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " "); ok && !inBlock && strings.HasPrefix(l, "#") {
				a[headingAnchor(h)] = true
			}
		}
		anchors[page] = a
		return a
	}
	links := 0
	for _, page := range docPages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s, which does not exist", page, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				t.Errorf("%s links to %s, but %s has no heading #%s", page, target, path, anchor)
			}
		}
	}
	if links < 20 {
		t.Fatalf("found only %d links in the README and docs/; the pattern no longer matches them", links)
	}
}

// headingAnchor is the anchor GitHub gives a heading: lower case, spaces
// as hyphens, punctuation other than hyphens and underscores dropped.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
