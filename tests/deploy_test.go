package tests

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/tests/freeport"
)

// The deployment files in deploy/ are checked in two places: here, what
// needs nothing beyond this module (the systemd unit, podstart), and in
// deploy/check, a module of its own, what needs third-party parsers (the
// compose file, the Kubernetes manifests, the Dockerfile).

const unitPath = "../deploy/systemd/concord.service"

// unit is a parsed systemd unit file: for each section, each key's values
// in order.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	var cont string
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cont != "" {
			line, cont = cont+" "+line, ""
		}
		if strings.HasSuffix(line, `\`) {
			cont = strings.TrimSuffix(line, `\`)
			continue
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s: cannot read line %q", path, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// last returns the value in effect for a key (the last one given).
func (u unit) last(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// unitWithBinary writes a copy of the unit whose ExecStart runs the concord
// built for this test run, from a directory of its own; the unit's own
// path, /usr/local/bin/concord, need not exist on this machine.
func unitWithBinary(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	b, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(dir, "bin", "concord")
	if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(local, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if !strings.Contains(text, "ExecStart=/usr/local/bin/concord serve") {
		t.Fatalf("%s: ExecStart does not run /usr/local/bin/concord serve", unitPath)
	}
	text = strings.ReplaceAll(text, "ExecStart=/usr/local/bin/concord ", "ExecStart="+local+" ")
	path = filepath.Join(dir, "concord.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

func systemdAnalyze(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("systemd-analyze")
	if err != nil {
		// make test sets CONCORD_REQUIRE_SYSTEMD_ANALYZE, so CI cannot pass
		// without the check; a developer's machine without systemd skips.
		if os.Getenv("CONCORD_REQUIRE_SYSTEMD_ANALYZE") != "" {
			t.Fatal("systemd-analyze is not installed (Debian package systemd), and CONCORD_REQUIRE_SYSTEMD_ANALYZE is set")
		}
		t.Skip("systemd-analyze is not installed (Debian package systemd); it verifies deploy/systemd/concord.service")
	}
	return path
}

// TestDeploySystemdVerify runs `systemd-analyze verify` on the unit. It
// exits 0 even for an unknown key and only prints a warning, so any output
// at all fails the test.
func TestDeploySystemdVerify(t *testing.T) {
	t.Parallel()
	sa := systemdAnalyze(t)
	_, path := unitWithBinary(t)
	out, err := newProc(t, time.Minute, sa, "verify", "--man=no", path).combinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", unitPath, err, out)
	}
}

// TestDeploySystemdHardening checks the sandboxing directives the unit must
// keep, and `systemd-analyze security`'s exposure score for the unit: at
// most 1.5 of 10 (it is 1.1; without the system call filter, ProtectSystem
// and PrivateDevices it is 2.9).
func TestDeploySystemdHardening(t *testing.T) {
	t.Parallel()
	u := parseUnit(t, unitPath)
	want := map[string]string{
		"StateDirectory":          "concord",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"NoNewPrivileges":         "yes",
		"CapabilityBoundingSet":   "",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX AF_NETLINK",
		"MemoryDenyWriteExecute":  "yes",
		"LockPersonality":         "yes",
		"Restart":                 "on-failure",
		"KillSignal":              "SIGTERM",
	}
	for k, v := range want {
		if got, ok := u["Service"][k]; !ok || u.last("Service", k) != v {
			t.Errorf("[Service] %s=%q, want %q", k, got, v)
		}
	}
	if u.last("Service", "DynamicUser") != "yes" && u.last("Service", "User") == "" {
		t.Error("[Service]: neither DynamicUser=yes nor a User=: it would run as root")
	}
	if !slices.Contains(u["Service"]["SystemCallFilter"], "@system-service") {
		t.Errorf("[Service] SystemCallFilter %q: want @system-service", u["Service"]["SystemCallFilter"])
	}
	if d, err := time.ParseDuration(u.last("Service", "TimeoutStopSec")); err != nil || d < 10*time.Second {
		t.Errorf("[Service] TimeoutStopSec=%q: want at least 10s for a clean stop", u.last("Service", "TimeoutStopSec"))
	}
	if len(u["Service"]["EnvironmentFile"]) == 0 {
		t.Error("[Service]: no EnvironmentFile for overrides")
	}
	sa := systemdAnalyze(t)
	_, path := unitWithBinary(t)
	out, err := newProc(t, time.Minute, sa, "security", "--offline=yes", "--threshold=15", "--no-pager", path).combinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: exposure above 1.5 (%v):\n%s", err, out)
	}
	if !regexp.MustCompile(`Overall exposure level for concord.service: \d`).Match(out) {
		t.Fatalf("systemd-analyze security printed no exposure level:\n%s", out)
	}
}

// expandExec expands an ExecStart= line as systemd does, for the forms the
// unit uses: %S (the state directory root) and %% specifiers, ${NAME} (one
// word, or part of one) and $NAME alone as a word (split at whitespace into
// zero or more words). Anything else (quotes, other specifiers, exec
// prefixes) fails the test rather than being guessed at.
func expandExec(t *testing.T, line string, env map[string]string, stateRoot string) []string {
	t.Helper()
	if line == "" || strings.ContainsAny(line, `"'`) || strings.ContainsAny(line[:1], "-@+!:|") {
		t.Fatalf("ExecStart=%s: quotes and exec prefixes are not handled by this test", line)
	}
	var argv []string
	bare := regexp.MustCompile(`^\$([A-Za-z_][A-Za-z0-9_]*)$`)
	braced := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)
	for _, word := range strings.Fields(line) {
		if m := bare.FindStringSubmatch(word); m != nil {
			argv = append(argv, strings.Fields(env[m[1]])...)
			continue
		}
		word = braced.ReplaceAllStringFunc(word, func(s string) string { return env[braced.FindStringSubmatch(s)[1]] })
		if strings.Contains(word, "$") {
			t.Fatalf("ExecStart=%s: %q: a form of $ this test does not expand", line, word)
		}
		var b strings.Builder
		for i := 0; i < len(word); i++ {
			if word[i] != '%' {
				b.WriteByte(word[i])
				continue
			}
			i++
			switch {
			case i < len(word) && word[i] == 'S':
				b.WriteString(stateRoot)
			case i < len(word) && word[i] == '%':
				b.WriteByte('%')
			default:
				t.Fatalf("ExecStart=%s: specifier in %q not handled by this test", line, word)
			}
		}
		argv = append(argv, b.String())
	}
	return argv
}

// readEnvFile reads NAME=value lines as systemd's EnvironmentFile= does for
// the simple cases: blank lines and # or ; comments are skipped.
func readEnvFile(t *testing.T, path string, env map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.ContainsAny(v, `"'\`) {
			t.Fatalf("%s: line %q is not NAME=value", path, line)
		}
		env[k] = v
	}
}

// TestDeploySystemdExecStart runs the unit's ExecStart as systemd would
// expand it: the Environment= defaults, then an EnvironmentFile with
// overrides (free loopback ports, and two flags through CONCORD_FLAGS),
// and %S/concord for the state directory. The node must serve, report
// ready on its metrics address, and exit 0 on the unit's KillSignal, so
// that Restart=on-failure leaves a stopped service stopped.
func TestDeploySystemdExecStart(t *testing.T) {
	t.Parallel()
	u := parseUnit(t, unitPath)
	env := map[string]string{}
	for _, e := range u["Service"]["Environment"] {
		if strings.ContainsAny(e, `"' `) {
			t.Fatalf("Environment=%s: one unquoted NAME=value per line is all this test reads", e)
		}
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	// The unit's own example env file must read cleanly too.
	readEnvFile(t, "../deploy/systemd/concord.env", env)
	files := u["Service"]["EnvironmentFile"]
	if len(files) != 1 || !strings.HasPrefix(files[0], "-") {
		t.Fatalf("EnvironmentFile=%q: want one, optional (-)", files)
	}
	dir := t.TempDir()
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", freeport.Port(t))
	metrics := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	override := filepath.Join(dir, "concord.env")
	content := fmt.Sprintf("# test overrides\nCONCORD_NODE_ID=host-a\nCONCORD_RAFT_ADDR=127.0.0.1:%d\nCONCORD_NATS_LISTEN=%s\nCONCORD_METRICS_LISTEN=%s\nCONCORD_FLAGS=--log-format json --tick 500ms\n",
		freeport.Port(t), strings.TrimPrefix(natsURL, "nats://"), metrics)
	if err := os.WriteFile(override, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	readEnvFile(t, override, env)
	stateRoot := filepath.Join(dir, "state")
	argv := expandExec(t, u.last("Service", "ExecStart"), env, stateRoot)
	if argv[0] != "/usr/local/bin/concord" || len(argv) < 2 || argv[1] != "serve" {
		t.Fatalf("ExecStart runs %q, want /usr/local/bin/concord serve", argv)
	}
	stateDir := filepath.Join(stateRoot, u.last("Service", "StateDirectory"))
	if i := slices.Index(argv, "--data-dir"); i < 0 || i+1 >= len(argv) || argv[i+1] != stateDir {
		t.Fatalf("ExecStart %q: want --data-dir in the StateDirectory (%s)", argv, stateDir)
	}
	if !slices.Contains(argv, "--tick") || !slices.Contains(argv, "json") || !slices.Contains(argv, "host-a") {
		t.Fatalf("ExecStart %q does not carry the EnvironmentFile's overrides", argv)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil { // systemd makes the StateDirectory
		t.Fatal(err)
	}
	n := &node{t: t, dataDir: stateDir, natsURL: natsURL, args: argv[1:], logPath: filepath.Join(dir, "concord.log")}
	n.start()
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			b, _ := os.ReadFile(n.logPath)
			t.Logf("concord %q:\n%s", argv, tail(string(b), 40))
		}
	})
	n.waitReady()
	for _, p := range []string{"/healthz", "/readyz"} {
		checkFor(t, 10*time.Second, 100*time.Millisecond, func() error {
			resp, err := http.Get("http://" + metrics + p)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", p, resp.Status)
			}
			return nil
		})
	}
	c := connect(t, natsURL)
	if id := c.grant(30); id < 1 {
		t.Fatalf("lease.grant gave id %d", id)
	}
	if s := u.last("Service", "KillSignal"); s != "SIGTERM" {
		t.Fatalf("KillSignal=%s: the test sends SIGTERM", s)
	}
	n.stop() // SIGTERM; fails the test unless concord exits 0
}

// TestDeployPodstart checks the Kubernetes start helper: --bootstrap on
// ordinal 0, --join on the others, appended to the arguments it got, and a
// refusal (exit 2, nothing executed) for what it cannot decide.
func TestDeployPodstart(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "podstart")
	if out, err := newProc(t, 0, "go", "build", "-o", bin, "../deploy/podstart").combinedOutput(); err != nil {
		t.Fatalf("build podstart: %v\n%s", err, out)
	}
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Fatal(err)
	}
	run := func(pod string, args ...string) (string, int) {
		p := newProc(t, 30*time.Second, bin, args...)
		p.cmd.Env = append(p.cmd.Env, "CONCORD_BIN="+echo, "POD_NAME="+pod)
		out, err := p.output()
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Exited() {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	for pod, want := range map[string]string{
		"concord-0":  "serve --node-id=concord-0 --data-dir=/data --bootstrap\n",
		"concord-1":  "serve --node-id=concord-1 --data-dir=/data --join\n",
		"concord-12": "serve --node-id=concord-12 --data-dir=/data --join\n",
	} {
		if got, code := run(pod, "serve", "--node-id="+pod, "--data-dir=/data"); got != want || code != 0 {
			t.Errorf("pod %s: ran %q (exit %d), want %q", pod, got, code, want)
		}
	}
	for _, bad := range [][]string{
		{"concord", "serve"},                  // no ordinal
		{"concord-x", "serve"},                // no ordinal
		{"concord-1", "lease", "grant"},       // not serve
		{"concord-1", "serve", "--join"},      // mode given
		{"concord-0", "serve", "-bootstrap"},  // mode given
		{"concord-2", "serve", "--join=true"}, // mode given
		{"concord-2"},                         // nothing
	} {
		if got, code := run(bad[0], bad[1:]...); code != 2 || got != "" {
			t.Errorf("pod %s, args %q: ran %q (exit %d), want a refusal (exit 2)", bad[0], bad[1:], got, code)
		}
	}
}
