package auth

import (
	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/client"
)

// Bearer is a client interceptor that sends token on every call, unary or
// streaming: connect.WithInterceptors(auth.Bearer(token)). It is the public
// client's (client.Bearer), so that there is one implementation.
func Bearer(token string) connect.Interceptor { return client.Bearer(token) }
