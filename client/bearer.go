package client

import (
	"context"

	"connectrpc.com/connect"
)

// Bearer is a client interceptor that sends token on every call, unary or
// streaming, as `Authorization: Bearer <token>`:
// connect.WithInterceptors(client.Bearer(token)). New adds it for
// WithToken.
func Bearer(token string) connect.Interceptor { return bearer("Bearer " + token) }

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			req.Header().Set("Authorization", string(b))
		}
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
