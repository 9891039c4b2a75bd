package check

import (
	"bytes"
	"debug/elf"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// dockerfile is deploy/Dockerfile parsed by BuildKit, the parser and
// linter `docker build` uses.
type dockerfile struct {
	build, final instructions.Stage
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("Dockerfile does not parse: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile parser warning: %s (%v)", w.Short, w.Location)
	}
	lint := linter.New(&linter.Config{ExperimentalAll: true, Warn: func(rule, desc, url, msg string, loc []parser.Range) {
		t.Errorf("Dockerfile lint %s at %v: %s", rule, loc, msg)
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("Dockerfile instructions: %v", err)
	}
	if len(stages) != 2 {
		t.Fatalf("%d stages, want a builder and the final image", len(stages))
	}
	return dockerfile{build: stages[0], final: stages[1]}
}

// replayBuild runs the build stage's RUN lines on this machine, in the
// repository root (the stage copies the repository to its WORKDIR), with
// /out/ (where the stage puts what the final image copies) moved to out.
// ARGs take their defaults except those in args.
func replayBuild(t *testing.T, d dockerfile, out string, args map[string]string) {
	t.Helper()
	env := os.Environ()
	for _, c := range d.build.Commands {
		switch c := c.(type) {
		case *instructions.ArgCommand:
			for _, kv := range c.Args {
				v, ok := args[kv.Key]
				if !ok {
					v = kv.ValueString()
				}
				env = append(env, kv.Key+"="+v)
			}
		case *instructions.RunCommand:
			if !c.PrependShell || len(c.CmdLine) != 1 {
				t.Fatalf("RUN %q: the replay handles the shell form only", c.CmdLine)
			}
			line := strings.ReplaceAll(c.CmdLine[0], "/out/", out+"/")
			if m := regexp.MustCompile(`(^|\s)/\S*`).FindAllString(line, -1); slices.ContainsFunc(m, func(p string) bool {
				return !strings.HasPrefix(strings.TrimSpace(p), out)
			}) {
				t.Fatalf("RUN %q: writes outside /out/, which the replay cannot map", c.CmdLine[0])
			}
			if strings.Contains(line, "chown") && os.Geteuid() != 0 {
				t.Logf("not root: skipping RUN %s", line)
				continue
			}
			// A build on a loaded machine takes what it takes: the test
			// binary's deadline bounds it.
			cmd := newChild(t, 0, "sh", "-c", line)
			cmd.cmd.Dir, cmd.cmd.Env = repoRoot, env
			if b, err := cmd.combinedOutput(); err != nil {
				t.Fatalf("RUN %s: %v\n%s", line, err, b)
			}
		}
	}
}

// TestDockerfileBuild checks the builder and replays its RUN lines: the
// binaries must come out static, stripped, and stamped with the version.
func TestDockerfileBuild(t *testing.T) {
	d := parseDockerfile(t)
	if !strings.HasPrefix(d.build.BaseName, "golang:1.26") {
		t.Errorf("builder FROM %s, want golang:1.26", d.build.BaseName)
	}
	var builds []string
	for _, c := range d.build.Commands {
		if r, ok := c.(*instructions.RunCommand); ok && strings.Contains(strings.Join(r.CmdLine, " "), "go build") {
			builds = append(builds, strings.Join(r.CmdLine, " "))
		}
	}
	for _, b := range builds {
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w`} {
			if !strings.Contains(b, want) {
				t.Errorf("RUN %s: lacks %s", b, want)
			}
		}
	}
	if !slices.ContainsFunc(builds, func(b string) bool {
		return strings.Contains(b, "-X main.version=${VERSION}") && strings.Contains(b, "./cmd/concord")
	}) {
		t.Errorf("no go build of ./cmd/concord with -X main.version=${VERSION}: %q", builds)
	}
	out := t.TempDir()
	const version = "9.8.7-deploycheck"
	replayBuild(t, d, out, map[string]string{"VERSION": version})
	for _, name := range []string{"concord", "podstart"} {
		f, err := elf.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked; scratch has no libc", name)
			}
		}
		if f.Section(".symtab") != nil {
			t.Errorf("%s has a symbol table: not built with -s", name)
		}
		f.Close()
	}
	got, err := newChild(t, time.Minute, filepath.Join(out, "concord"), "version").combinedOutput()
	if err != nil || !strings.Contains(string(got), version) {
		t.Errorf("concord version: %q (%v), want %s", got, err, version)
	}
	if os.Geteuid() == 0 {
		fi, err := os.Stat(filepath.Join(out, "data"))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 65532 || st.Gid != 65532 || fi.Mode().Perm() != 0o700 {
			t.Errorf("/out/data: owner %d:%d mode %v, want 65532:65532 0700", st.Uid, st.Gid, fi.Mode().Perm())
		}
	}
}

// TestDockerfileImage checks the final stage and runs its ENTRYPOINT and
// CMD as a local process: the binary the builder makes, as the image's
// user (when the test runs as root), on the data directory the builder
// makes, with only the listen addresses' ports changed to free loopback
// ones (0.0.0.0 becomes 127.0.0.1). The node must answer /healthz and
// /readyz with 200 and grant a lease over NATS.
func TestDockerfileImage(t *testing.T) {
	d := parseDockerfile(t)
	if d.final.BaseName != "scratch" && !strings.HasPrefix(d.final.BaseName, "gcr.io/distroless/static") {
		t.Errorf("final FROM %s, want scratch or distroless/static", d.final.BaseName)
	}
	copies := map[string]string{} // image path -> builder path
	var user string
	var entrypoint, cmd *instructions.ShellDependantCmdLine
	var exposed []int
	var dataChown string
	for _, c := range d.final.Commands {
		switch c := c.(type) {
		case *instructions.CopyCommand:
			if c.From != d.build.Name || len(c.SourcePaths) != 1 {
				t.Fatalf("COPY %v: want one path --from=%s", c.SourcePaths, d.build.Name)
			}
			copies[c.DestPath] = c.SourcePaths[0]
			if c.DestPath == "/data" {
				dataChown = c.Chown
			}
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			entrypoint = &c.ShellDependantCmdLine
		case *instructions.CmdCommand:
			cmd = &c.ShellDependantCmdLine
		case *instructions.ExposeCommand:
			for _, p := range c.Ports {
				n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
				if err != nil {
					t.Fatalf("EXPOSE %s: %v", p, err)
				}
				exposed = append(exposed, n)
			}
		case *instructions.HealthCheckCommand:
			t.Errorf("HEALTHCHECK: the image has no program to run one")
		}
	}
	if copies["/etc/ssl/certs/ca-certificates.crt"] == "" {
		t.Error("no CA certificates in the image (needed for TLS to an external NATS)")
	}
	var uid, gid int
	if _, err := fmt.Sscanf(user, "%d:%d", &uid, &gid); err != nil || uid == 0 || gid == 0 {
		t.Fatalf("USER %q: want a numeric non-root uid:gid", user)
	}
	if dataChown != user {
		t.Errorf("/data is copied with --chown=%q, not to the image's user %s", dataChown, user)
	}
	if entrypoint == nil || cmd == nil || entrypoint.PrependShell || cmd.PrependShell {
		t.Fatal("want ENTRYPOINT and CMD, both in exec (JSON) form: scratch has no shell")
	}
	if !slices.Equal(entrypoint.CmdLine, []string{"/concord"}) {
		t.Errorf("ENTRYPOINT %q, want [/concord]", entrypoint.CmdLine)
	}
	argv := append(slices.Clone(entrypoint.CmdLine), cmd.CmdLine...)
	if argv[1] != "serve" {
		t.Fatalf("CMD %q does not start with serve", cmd.CmdLine)
	}
	for _, flag := range []string{"nats-listen", "metrics-listen"} {
		v, ok := flagValue(argv, flag)
		if !ok || !strings.HasPrefix(v, "0.0.0.0:") || !slices.Contains(exposed, portOf(t, v)) {
			t.Errorf("CMD --%s %q: want 0.0.0.0:<an EXPOSEd port> (EXPOSE %v)", flag, v, exposed)
		}
	}
	// The run below maps 0.0.0.0 to loopback, which would hide this: concord
	// refuses an unspecified Raft address.
	if v, _ := flagValue(argv, "raft-addr"); v != "" {
		host, _, err := net.SplitHostPort(v)
		if ip := net.ParseIP(host); err != nil || host == "" || (ip != nil && ip.IsUnspecified()) {
			t.Errorf("CMD --raft-addr %q: concord refuses an unspecified address", v)
		}
	}
	if v, _ := flagValue(argv, "log-format"); v != "json" {
		t.Errorf("CMD --log-format %q, want json", v)
	}
	dataDir, _ := flagValue(argv, "data-dir")
	if copies[dataDir] == "" {
		t.Errorf("CMD --data-dir %s is not the directory the image provides for its user", dataDir)
	}

	// Build what the image holds, then run it.
	out, err := os.MkdirTemp("", "concord-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	if err := os.Chmod(out, 0o755); err != nil { // reachable by the image's user
		t.Fatal(err)
	}
	replayBuild(t, d, out, nil)
	local := func(imagePath string) string {
		src, ok := copies[imagePath]
		if !ok || !strings.HasPrefix(src, "/out/") {
			t.Fatalf("%s is not copied from the builder's /out/", imagePath)
		}
		return filepath.Join(out, strings.TrimPrefix(src, "/out/"))
	}
	l := newLocalizer(t)
	l.addHost("image", "127.0.0.1")
	args := l.args("image", argv, dataDir, local(dataDir))
	args[0] = local(entrypoint.CmdLine[0])
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	} else {
		t.Logf("not root: running as uid %d, not the image's %s", os.Geteuid(), user)
	}
	p := startAs(t, "image", args, cred)
	listen, _ := flagValue(argv, "nats-listen")
	metrics, _ := flagValue(argv, "metrics-listen")
	id, ok := flagValue(argv, "node-id")
	if !ok {
		id = "n1" // concord's default
	}
	checkCluster(t, []*proc{p}, []string{id},
		[]string{"nats://" + l.local("image", portOf(t, listen))}, []string{l.local("image", portOf(t, metrics))})
	if b, _ := os.ReadFile(p.log); !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		t.Errorf("with --log-format json the log should be JSON lines; it starts %.80q", b)
	}
}
