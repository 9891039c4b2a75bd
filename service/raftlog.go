package service

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// newRaftLogger returns an hclog.Logger whose lines land in log. hclog
// writes JSON; the writer turns each line back into a structured record.
func newRaftLogger(log *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "raft",
		Level:      hclog.Info,
		JSONFormat: true,
		Output:     &hclogBridge{log: log},
	})
}

type hclogBridge struct{ log *slog.Logger }

func (b *hclogBridge) Write(p []byte) (int, error) {
	var rec map[string]any
	if err := json.Unmarshal(p, &rec); err != nil {
		b.log.Info(strings.TrimSpace(string(p)))
		return len(p), nil
	}
	msg, _ := rec["@message"].(string)
	lvl, _ := rec["@level"].(string)
	attrs := make([]slog.Attr, 0, len(rec))
	for k, v := range rec {
		if !strings.HasPrefix(k, "@") {
			attrs = append(attrs, slog.Any(k, v))
		}
	}
	b.log.LogAttrs(context.Background(), raftLevel(lvl), msg, attrs...)
	return len(p), nil
}

// raftLevel maps hclog levels to slog's. Raft's info lines (elections,
// snapshots) are rare and worth keeping; its debug and trace lines are not.
func raftLevel(l string) slog.Level {
	switch l {
	case "error":
		return slog.LevelError
	case "warn":
		return slog.LevelWarn
	case "info":
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
