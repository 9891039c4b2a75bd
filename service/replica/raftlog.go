package replica

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/concord-io/concord/service/loglimit"
)

// NewRaftLogger returns an hclog.Logger whose lines land in log. hclog
// writes JSON; the writer turns each line back into a structured record.
func NewRaftLogger(log *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       "raft",
		Level:      hclog.Info,
		JSONFormat: true,
		Output:     &hclogBridge{log: log, repeats: loglimit.NewRepeats(loglimit.Window)},
	})
}

// hclogBridge writes Raft's hclog lines to the node's slog logger. Its
// warnings and errors go through a loglimit.Repeats: a peer that is cut off
// makes Raft repeat the same one for every heartbeat or election round.
// So do the info lines of an election round (electionRound), which a node
// cut off from its peers logs twice a second for as long as the cut
// lasts; Raft's other info lines (a leader elected, snapshots) are rare
// and all kept.
type hclogBridge struct {
	log     *slog.Logger
	repeats *loglimit.Repeats
}

func (b *hclogBridge) Write(p []byte) (int, error) {
	var rec map[string]any
	if err := json.Unmarshal(p, &rec); err != nil {
		b.log.Info(strings.TrimSpace(string(p)))
		return len(p), nil
	}
	msg, _ := rec["@message"].(string)
	lvl, _ := rec["@level"].(string)
	level := raftLevel(lvl)
	var held int
	if (level >= slog.LevelWarn || electionRound[msg]) && b.repeats != nil {
		var ok bool
		if ok, held = b.repeats.Allow(lvl + " " + msg); !ok {
			return len(p), nil
		}
	}
	attrs := make([]slog.Attr, 0, len(rec)+1)
	for k, v := range rec {
		if !strings.HasPrefix(k, "@") {
			attrs = append(attrs, slog.Any(k, v))
		}
	}
	if held > 0 {
		attrs = append(attrs, slog.Int("repeated", held))
	}
	b.log.LogAttrs(context.Background(), level, msg, attrs...)
	return len(p), nil
}

// electionRound are the info lines Raft logs in every election round.
var electionRound = map[string]bool{
	"entering candidate state":                               true,
	"pre-vote campaign failed, waiting for election timeout": true,
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
