package api

import (
	"context"
	"log/slog"
	"time"

	"connectrpc.com/connect"
)

// LogRequests logs every call with its procedure, code and duration: at debug
// level when it succeeded, at info level when it returned an error.
func LogRequests(log *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			res, err := next(ctx, req)
			level, code := slog.LevelDebug, "ok"
			if err != nil {
				level, code = slog.LevelInfo, connect.CodeOf(err).String()
			}
			// Not logged (a success below debug, the default): nothing to
			// build. The attributes cost a purchase a few allocations.
			if !log.Enabled(ctx, level) {
				return res, err
			}
			log.Log(ctx, level, "rpc", "procedure", req.Spec().Procedure, "code", code,
				"duration_ms", float64(time.Since(start).Microseconds())/1000, "protocol", req.Peer().Protocol)
			return res, err
		}
	}
}
