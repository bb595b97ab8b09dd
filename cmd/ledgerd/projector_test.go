package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/history"
)

// An idle projector logs its status once at info, then at debug until
// something changes (issue 22, item 7): it used to repeat the same line
// every 30 s.
func TestProjectionStatusLoggedWhenItChanges(t *testing.T) {
	t.Parallel()
	pass := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	idle := history.ProjectorStatus{Shards: []string{"shard-1"}, CaughtUp: true, Applied: 7, Lag: 80 * time.Millisecond, LastPass: pass}
	later := idle
	later.LastPass = pass.Add(30 * time.Second) // only the time of the pass moved
	applied := later
	applied.Applied = 9
	applied.Lag = 60 * time.Millisecond
	behind := applied
	behind.CaughtUp = false
	moreShards := behind
	moreShards.Shards = []string{"shard-1", "shard-2"}
	tests := []struct {
		name   string
		status history.ProjectorStatus
		info   bool // logged at info, else at debug
	}{
		{"first line", idle, true},
		{"idle", idle, false},
		{"idle, a later pass", later, false},
		{"entries applied", applied, true},
		{"idle again", applied, false},
		{"behind", behind, true},
		{"another shard", moreShards, true},
		{"idle at last", moreShards, false},
	}
	var out bytes.Buffer
	status := statusLine{log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for _, tt := range tests {
		out.Reset()
		status.write(context.Background(), tt.status)
		want := "level=DEBUG"
		if tt.info {
			want = "level=INFO"
		}
		if line := out.String(); !strings.Contains(line, want) || !strings.Contains(line, `msg="projection status"`) {
			t.Errorf("%s: logged %q, want a projection status at %s", tt.name, line, want)
		}
	}
}
