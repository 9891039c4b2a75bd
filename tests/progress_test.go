package tests

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/subjects"
)

// onTerminal runs the concord binary with args on a pseudo-terminal
// (util-linux script(1)), as a person at a terminal would, and returns
// what the terminal showed.
func onTerminal(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) (util-linux) is not installed: no pseudo-terminal to run the CLI on")
	}
	quoted := make([]string, 0, len(args)+1)
	for _, a := range append([]string{binPath}, args...) {
		quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	p := newProc(t, 2*time.Minute, "script", "-qec", strings.Join(quoted, " "), "/dev/null")
	out, err := p.combinedOutput()
	if err != nil {
		t.Fatalf("concord %s on a terminal: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Long work shows a progress bar on a terminal, and nothing of it when
// its output goes to a pipe or is JSON: snapshot save, snapshot restore
// and bench.
func TestProgressOnTerminalOnly(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{})
	c := connect(t, n.natsURL)
	// Enough state for a backup of more than one chunk.
	big := strings.Repeat("v", 2000)
	for i := range 1500 {
		c.ok(subjects.KVPut, map[string]any{"key": fmt.Sprintf("progress.%04d", i), "value": big}, nil)
	}
	dir := t.TempDir()
	backup := filepath.Join(dir, "b.snap")

	tty := onTerminal(t, "snapshot", "save", backup, "--server", n.natsURL)
	if !regexp.MustCompile(`saving b\.snap +\d+% \|`).MatchString(tty) || !strings.Contains(tty, "saved "+backup) {
		t.Errorf("snapshot save on a terminal showed no progress bar, or no result:\n%q", tty)
	}
	piped, err := runConcord(t, time.Minute, "snapshot", "save", backup, "--server", n.natsURL)
	if err != nil || strings.Contains(piped, "saving b.snap") || strings.ContainsAny(piped, "\r%") {
		t.Errorf("snapshot save to a pipe: %v, drew progress:\n%q", err, piped)
	}
	if jsonOut := onTerminal(t, "snapshot", "save", backup, "--server", n.natsURL, "--json"); strings.Contains(jsonOut, "saving b.snap") {
		t.Errorf("snapshot save --json on a terminal drew progress:\n%q", jsonOut)
	}

	tty = onTerminal(t, "snapshot", "restore", backup, "--data-dir", filepath.Join(dir, "r1"))
	for _, pass := range []string{"checking b.snap", "decoding b.snap", "writing b.snap", "restored revision"} {
		if !strings.Contains(tty, pass) {
			t.Errorf("snapshot restore on a terminal did not show %q:\n%q", pass, tty)
		}
	}
	piped, err = runConcord(t, time.Minute, "snapshot", "restore", backup, "--data-dir", filepath.Join(dir, "r2"))
	if err != nil || strings.Contains(piped, "checking b.snap") || strings.Contains(piped, "\r") {
		t.Errorf("snapshot restore to a pipe: %v, drew progress:\n%q", err, piped)
	}

	tty = onTerminal(t, "bench", "--url", n.natsURL, "--duration", "1s", "--clients", "2", "put")
	if !regexp.MustCompile(`put +\d+% \|`).MatchString(tty) {
		t.Errorf("bench on a terminal showed no progress bar:\n%q", tty)
	}
	piped, err = runConcord(t, time.Minute, "bench", "--url", n.natsURL, "--duration", "1s", "--clients", "2", "--json", "put")
	if err != nil || strings.ContainsAny(piped, "\r%") || !strings.HasPrefix(strings.TrimSpace(piped), "{") {
		t.Errorf("bench --json to a pipe: %v, not one JSON object:\n%q", err, piped)
	}
}
