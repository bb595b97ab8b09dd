package client

import (
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
)

// Client calls one ledgerd. Its fields are the generated clients of
// LedgerService and AdminService, with their request and response
// messages. WebhookService has none here: Retry's safety rests on every
// mutation's request_id, and CreateWebhookEndpoint and RotateWebhookSecret
// carry none (sent again, they would make a second endpoint or a second
// rotation); call it with pointledgerv1connect.NewWebhookServiceClient and
// the Bearer interceptor alone.
type Client struct {
	Ledger pointledgerv1connect.LedgerServiceClient
	Admin  pointledgerv1connect.AdminServiceClient // needs an admin token
}

// Protocol is the wire protocol of a Client. ledgerd serves all three on
// one port.
type Protocol int

const (
	ProtocolConnect Protocol = iota // Connect over HTTP/1.1 or HTTP/2 (the default)
	ProtocolGRPC                    // gRPC: HTTP/2, without TLS (h2c) for an http:// URL
	ProtocolGRPCWeb                 // gRPC-Web over HTTP/1.1 or HTTP/2
)

func (p Protocol) String() string {
	switch p {
	case ProtocolConnect:
		return "connect"
	case ProtocolGRPC:
		return "grpc"
	case ProtocolGRPCWeb:
		return "grpcweb"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// An Option configures New.
type Option func(*config)

type config struct {
	token    string
	protocol Protocol
	http     connect.HTTPClient
	retry    RetryPolicy
	extra    []connect.ClientOption
}

// WithToken sends token on every call (Authorization: Bearer): a service,
// user or admin token (see docs/operations.md, Security).
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithProtocol chooses the wire protocol; ProtocolConnect by default.
func WithProtocol(p Protocol) Option { return func(c *config) { c.protocol = p } }

// WithHTTPClient sends the calls with h instead of a client of New's own.
// For ProtocolGRPC it must speak HTTP/2 (h2c for an http:// URL).
func WithHTTPClient(h connect.HTTPClient) Option { return func(c *config) { c.http = h } }

// WithRetry replaces DefaultRetryPolicy; WithRetry(NoRetry) turns retries off.
func WithRetry(p RetryPolicy) Option { return func(c *config) { c.retry = p } }

// WithClientOptions adds options of connect-go's own (compression, the JSON
// codec, more interceptors, which run inside the retries: once per attempt).
func WithClientOptions(opts ...connect.ClientOption) Option {
	return func(c *config) { c.extra = append(c.extra, opts...) }
}

// New returns a client of the ledgerd at baseURL ("http://localhost:8080",
// the LEDGER_URL of `make run`'s .local/dev.env). It makes no call.
func New(baseURL string, opts ...Option) *Client {
	c := config{retry: DefaultRetryPolicy}
	for _, o := range opts {
		o(&c)
	}
	if c.http == nil {
		c.http = newHTTPClient(c.protocol)
	}
	// The retries outermost, so that each attempt goes through everything
	// else, the token included.
	interceptors := []connect.Interceptor{Retry(c.retry)}
	if c.token != "" {
		interceptors = append(interceptors, Bearer(c.token))
	}
	options := []connect.ClientOption{connect.WithInterceptors(interceptors...)}
	switch c.protocol {
	case ProtocolGRPC:
		options = append(options, connect.WithGRPC())
	case ProtocolGRPCWeb:
		options = append(options, connect.WithGRPCWeb())
	case ProtocolConnect:
	}
	options = append(options, c.extra...)
	return &Client{
		Ledger: pointledgerv1connect.NewLedgerServiceClient(c.http, baseURL, options...),
		Admin:  pointledgerv1connect.NewAdminServiceClient(c.http, baseURL, options...),
	}
}

// newHTTPClient is an HTTP client for protocol: HTTP/1.1 or HTTP/2 as the
// server offers for Connect and gRPC-Web; HTTP/2 only for gRPC, without TLS
// for http:// URLs, as ledgerd serves it.
func newHTTPClient(protocol Protocol) *http.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if protocol == ProtocolGRPC {
		var h2 http.Protocols
		h2.SetHTTP2(true)
		h2.SetUnencryptedHTTP2(true)
		transport.Protocols = &h2
	}
	return &http.Client{Transport: transport}
}
