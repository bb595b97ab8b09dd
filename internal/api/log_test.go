package api

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
)

// TestLogRequestsLevels: a success is logged at debug, a failure at info,
// and nothing below the logger's level.
func TestLogRequestsLevels(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return connect.NewResponse(&pb.PurchaseResponse{}), nil
	}
	fail := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("no"))
	}
	tests := []struct {
		name  string
		level slog.Level
		next  connect.UnaryFunc
		want  string // in the log line; "": no line
	}{
		{name: "success at debug", level: slog.LevelDebug, next: ok, want: "level=DEBUG msg=rpc procedure=\"\" code=ok"},
		{name: "success at info: not logged", level: slog.LevelInfo, next: ok},
		{name: "failure at info", level: slog.LevelInfo, next: fail, want: "level=INFO msg=rpc procedure=\"\" code=failed_precondition"},
		{name: "failure at warn: not logged", level: slog.LevelWarn, next: fail},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: tt.level}))
			_, _ = LogRequests(log)(tt.next)(context.Background(), connect.NewRequest(&pb.PurchaseRequest{}))
			got := out.String()
			if tt.want == "" && got != "" {
				t.Errorf("logged %q, want nothing", got)
			}
			if tt.want != "" && (!strings.Contains(got, tt.want) || !strings.Contains(got, "duration_ms=")) {
				t.Errorf("logged %q, want it to hold %q and a duration", got, tt.want)
			}
		})
	}
}
