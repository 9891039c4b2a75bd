package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/concord-io/concord/subjects"
)

// logLines reads a node's log as JSON objects, failing on any other line.
func logLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", sc.Text(), err)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := rec[k]; !ok {
				t.Fatalf("log line without %q: %s", k, sc.Text())
			}
		}
		out = append(out, rec)
	}
	return out
}

// With --log-format json every line, Raft's and NATS's included, is one
// JSON object, and serving requests at info level adds no lines.
func TestLogFormatJSON(t *testing.T) {
	t.Parallel()
	n := startNode(t, nodeOpts{flags: []string{"--log-format", "json", "--log-level", "info"}})
	c := connect(t, n.natsURL)
	c.grant(10) // the node is serving
	before := len(logLines(t, n.logPath))
	for i := 0; i < 100; i++ {
		id := c.grant(10)
		c.put(fmt.Sprintf("logs.k%d", i), i, id)
		c.fails(subjects.LeaseKeepAlive, map[string]any{"id": 999999}, "lease_not_found")
	}
	c.get(map[string]any{"prefix": "logs."})
	if after := logLines(t, n.logPath); len(after) != before {
		t.Errorf("300 requests wrote %d log lines at info: %v", len(after)-before, after[before:])
	}
	n.stop()
	var raftLines, started int
	for _, rec := range logLines(t, n.logPath) {
		if rec["component"] == "raft" {
			raftLines++
		}
		if rec["msg"] == "concord started" {
			started++
		}
	}
	if raftLines == 0 || started != 1 {
		t.Errorf("%d raft lines, %d start lines in the JSON log", raftLines, started)
	}
}

func TestLogFormatRefusesUnknown(t *testing.T) {
	t.Parallel()
	out, err := newProc(t, time.Minute, binPath, "serve", "--log-format", "xml", "--data-dir", t.TempDir()).combinedOutput()
	if err == nil || !strings.Contains(string(out), "--log-format") {
		t.Fatalf("concord serve --log-format xml: %v\n%s", err, out)
	}
}
