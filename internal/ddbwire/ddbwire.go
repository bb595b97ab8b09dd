// Package ddbwire sends the write path's TransactWriteItems and GetItem to
// DynamoDB without the AWS SDK's middleware stack (issue 37): the request
// encoded straight from the SDK's input types into a reused buffer, signed
// with SigV4 (sign.go) over a payload hash computed once, sent with the same
// HTTP client with its body in memory; a GetItem's item read by a decoder
// of DynamoDB's JSON (decode.go). About a third of ledgerd's CPU per purchase was
// the SDK's stack (its serialiser, its middlewares, ~390 allocations a
// call).
//
// What it keeps of the SDK client it is built from: the endpoint (resolved
// once, by the client's own resolver), the region, the cached credentials,
// the retryer (the same instance, so the same attempts, backoff and retry
// quota) and the response checksum setting. An answer that is not a
// success is handed to the SDK client's own deserialiser (by replaying the
// response through it), so a caller gets exactly the errors the SDK gives:
// *types.TransactionCanceledException with its reasons and items, the
// throttling exceptions, generic API errors, wrapped in the same
// *smithy.OperationError and response error. Every other operation goes
// through the SDK client itself.
//
// The requests go over connections of its own (Options.OwnConns, ledgerd's
// -lean-conns, on by default; conn.go): net/http's Transport hands every
// request to its connection's writeLoop goroutine and the answer back from
// its readLoop, two goroutine hand-offs a call that were about a fifth of
// ledgerd's CPU samples a purchase. Here the caller's goroutine takes an
// idle HTTP/1.1 keep-alive connection (LIFO, at most the transport's
// MaxIdleConnsPerHost idle, closed when idle longer than its
// IdleConnTimeout), or dials one with the HTTP client's dialer (TLS with
// its TLS configuration and handshake timeout when the endpoint is https,
// HTTP/1.1 by ALPN); writes the signed request, head and body, in one
// write; reads the answer with http.ReadResponse (Content-Length or
// chunked) and its body to the end, or a success of the simple form
// DynamoDB's have that came whole in the connection's buffer as it is,
// without a Response (quick.go); and puts the connection back unless
// the answer said Connection: close or more bytes than the answer came.
// The context's end closes the connection in use (context.AfterFunc), so
// the call returns with the context's error and the connection is not
// used again; the client's timeout, and the SDK's read timeout when set,
// apply as in the HTTP client. One send again, outside the retryer: a
// request on a reused connection that got no byte of an answer, its write
// having failed or its first read having found the connection closed
// (EOF, ECONNRESET, ECONNABORTED, EPIPE: a server that closed an idle
// connection), goes once more on a new connection; not after a timeout,
// the context's end or any byte of an answer, and never from a new
// connection. That is safe for what goes this way: a TransactWriteItems
// carries its ClientRequestToken (the same on every attempt, so DynamoDB
// answers a repeat within 10 minutes with the first outcome) and a GetItem
// is a read. Any other failure is a send error for the retryer, as
// net/http's are. When the HTTP client is not an *http.Client or the
// SDK's BuildableClient (whose settings are read), its transport dials TLS
// itself, or it would reach the endpoint through a proxy (HTTP_PROXY,
// HTTPS_PROXY and NO_PROXY, as its Proxy function says, asked once at
// New), the requests go through the HTTP client as before
// (Client.OwnConns says which). Answers that are not a success are
// replayed through the SDK client either way.
//
// What it does not do that the SDK does: clock skew correction (the SDK
// shifts its signing time after a skewed answer), the amz-sdk-* headers,
// checking the input's required fields (DynamoDB refuses an invalid request
// itself, with ValidationException), and the account-based endpoint the SDK
// may pick when the credentials carry an account id (the region's endpoint
// is resolved instead: both reach the same tables).
package ddbwire

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Doer sends an HTTP request (ddbhttp.Doer, an *http.Client).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Options are what New takes besides the SDK client.
type Options struct {
	// HTTPClient sends the requests: the HTTP client the SDK client was
	// given (ddbhttp.Client()), not one wrapped in ddbhttp.OneWrite: the
	// body here is already in memory, which net/http writes with its
	// headers.
	HTTPClient Doer
	// Observe, if set, is told of every call this package carries out
	// (after its retries), as the SDK's metrics middleware would be.
	Observe func(operation string, took time.Duration, err error)
	// OwnConns sends the requests over connections of ddbwire's own
	// (conn.go), with HTTPClient's settings, instead of through
	// HTTPClient: unless HTTPClient is not an *http.Client or the SDK's
	// BuildableClient, its transport dials TLS itself, or the endpoint is
	// reached through a proxy (Client.OwnConns says which).
	OwnConns bool
}

// Client is the SDK client with TransactWriteItems and GetItem sent the
// lean way; the SDK client's other methods are its own.
type Client struct {
	*dynamodb.Client
	http      Doer
	conns     *conns // nil: through http
	url       *url.URL
	uri       string // the request line's
	region    string
	creds     aws.CredentialsProvider
	signer    *signer
	retryer   aws.Retryer
	checkCRC  bool
	observe   func(string, time.Duration, error)
	userAgent []string
	tokens    dynamodb.IdempotencyTokenProvider
}

var errUnsupported = errors.New("not supported by ddbwire")

// New builds a Client from the SDK client db: its endpoint is resolved
// here, once, by db's resolver (DynamoDB Local's BaseEndpoint in tests, the
// region's endpoint in production).
func New(ctx context.Context, db *dynamodb.Client, o Options) (*Client, error) {
	opts := db.Options()
	if o.HTTPClient == nil {
		return nil, errors.New("ddbwire: no HTTP client")
	}
	if opts.Credentials == nil || opts.Retryer == nil || opts.EndpointResolverV2 == nil || opts.IdempotencyTokenProvider == nil {
		return nil, errors.New("ddbwire: the SDK client has no credentials, retryer, endpoint resolver or idempotency token provider")
	}
	params := dynamodb.EndpointParameters{
		Region:                aws.String(opts.Region),
		Endpoint:              opts.BaseEndpoint,
		UseFIPS:               aws.Bool(opts.EndpointOptions.UseFIPSEndpoint == aws.FIPSEndpointStateEnabled),
		UseDualStack:          aws.Bool(opts.EndpointOptions.UseDualStackEndpoint == aws.DualStackEndpointStateEnabled),
		AccountIdEndpointMode: aws.String(string(aws.AccountIDEndpointModeDisabled)),
	}
	ep, err := opts.EndpointResolverV2.ResolveEndpoint(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("ddbwire: resolve the DynamoDB endpoint: %w", err)
	}
	u := ep.URI
	if u.Path == "" {
		u.Path = "/"
	}
	host := hostOf(u.Scheme, u.Host)
	creds := opts.Credentials
	if !aws.IsCredentialsProvider(creds, (*aws.CredentialsCache)(nil)) {
		creds = aws.NewCredentialsCache(creds)
	}
	var own *conns
	if o.OwnConns {
		if own, err = newConns(o.HTTPClient, &u); err != nil && !errors.Is(err, errNoOwnConns) {
			return nil, err
		}
	}
	return &Client{
		Client: db, http: o.HTTPClient, conns: own, url: &u, uri: u.RequestURI(), region: opts.Region, creds: creds,
		signer:   &signer{host: host, region: opts.Region, service: "dynamodb"},
		retryer:  opts.Retryer,
		checkCRC: !opts.DisableValidateResponseChecksum,
		observe:  o.Observe,
		tokens:   opts.IdempotencyTokenProvider,
		// The SDK's own names go in its User-Agent; ours says who sent it.
		userAgent: []string{"pointledger-ddbwire"},
	}, nil
}

// Endpoint is the URL requests go to.
func (c *Client) Endpoint() string { return c.url.String() }

// OwnConns says whether the requests go over ddbwire's own connections
// (Options.OwnConns), not through the HTTP client.
func (c *Client) OwnConns() bool { return c.conns != nil }

// CloseIdleConnections closes ddbwire's idle connections (its own; the
// HTTP client's are the HTTP client's).
func (c *Client) CloseIdleConnections() {
	if c.conns != nil {
		c.conns.closeIdle()
	}
}

// bodies are request bodies being built, and scratch for signing; a request
// sent through the HTTP client gets its own copy of its body (the transport
// may read a body after Do returns), one over ddbwire's own connections is
// written before the call returns.
var bodies = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

// TransactWriteItems sends in without the SDK's stack; with per-call
// options, or an input the encoder does not know, it is the SDK's call.
func (c *Client) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if len(optFns) > 0 || in == nil {
		return c.Client.TransactWriteItems(ctx, in, optFns...)
	}
	if in.ClientRequestToken == nil {
		// As the SDK's idempotency token middleware does (into the input,
		// too): every attempt of the call carries the one token, so that
		// DynamoDB answers a retry after a lost answer with the first
		// outcome.
		token, err := c.tokens.GetIdempotencyToken()
		if err != nil {
			return nil, operationError("TransactWriteItems", err)
		}
		in.ClientRequestToken = &token
	}
	buf := bodies.Get().(*[]byte)
	b, err := AppendTransactWriteItems((*buf)[:0], in)
	if err != nil {
		*buf = b[:0]
		bodies.Put(buf)
		return c.Client.TransactWriteItems(ctx, in)
	}

	start := time.Now()
	err = c.call(ctx, "TransactWriteItems", c.requestBody(b), answer{replay: func(ctx context.Context, resp *http.Response) error {
		_, err := c.Client.TransactWriteItems(ctx, in, replay(resp))
		return sdkError(err)
	}})
	*buf = b[:0]
	bodies.Put(buf)
	if c.observe != nil {
		c.observe("TransactWriteItems", time.Since(start), err)
	}
	if err != nil {
		return nil, err
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// answer is how an operation's answers are read: a success's body by read
// (nil: nothing to read; false: not readable here, so the SDK reads it),
// anything else by replay, the SDK client's own call answered with it.
type answer struct {
	read   func(body []byte) bool
	replay func(context.Context, *http.Response) error
}

// GetItem reads an item without the SDK's stack (the write path's account
// read on a user's first write); with per-call options, or an input the
// encoder does not know, it is the SDK's call.
func (c *Client) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if len(optFns) > 0 || in == nil {
		return c.Client.GetItem(ctx, in, optFns...)
	}
	buf := bodies.Get().(*[]byte)
	b, err := AppendGetItem((*buf)[:0], in)
	if err != nil {
		*buf = b[:0]
		bodies.Put(buf)
		return c.Client.GetItem(ctx, in)
	}

	start := time.Now()
	var out *dynamodb.GetItemOutput
	err = c.call(ctx, "GetItem", c.requestBody(b), answer{
		read: func(body []byte) bool {
			item, err := DecodeItem(body)
			out = &dynamodb.GetItemOutput{Item: item}
			return err == nil
		},
		replay: func(ctx context.Context, resp *http.Response) error {
			var err error
			out, err = c.Client.GetItem(ctx, in, replay(resp))
			return sdkError(err)
		},
	})
	*buf = b[:0]
	bodies.Put(buf)
	if c.observe != nil {
		c.observe("GetItem", time.Since(start), err)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// replay makes an SDK call answer with resp, once, without retries or
// APIOptions (the metrics middleware counts the call once, here): its
// deserialiser then reads resp as it reads every answer.
func replay(resp *http.Response) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.HTTPClient = replayer{resp: resp}
		o.Retryer = aws.NopRetryer{}
		o.APIOptions = nil
	}
}

type replayer struct{ resp *http.Response }

func (r replayer) Do(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	resp := *r.resp
	resp.Request = req
	return &resp, nil
}

// requestBody is b as a request's body: b itself when the request is
// written before the call returns (ddbwire's own connections), a copy when
// the HTTP client sends it.
func (c *Client) requestBody(b []byte) []byte {
	if c.conns != nil {
		return b
	}
	return bytes.Clone(b)
}

// call sends body as operation's request with the retryer's policy, as the
// SDK's retry middleware does: an attempt token, the attempt, the retry
// token's release, IsErrorRetryable, MaxAttempts, a retry (quota) token,
// RetryDelay, a sleep that the context ends. a.replay turns an answer that
// is not a success into the SDK's error.
func (c *Client) call(ctx context.Context, operation string, body []byte, a answer) error {
	buf := bodies.Get().(*[]byte)
	scratch, err := c.callWith(ctx, operation, body, (*buf)[:0], a)
	*buf = scratch[:0]
	bodies.Put(buf)
	return err
}

// callWith is call with scratch for signing (and the request, on ddbwire's
// own connections), returned.
func (c *Client) callWith(ctx context.Context, operation string, body, scratch []byte, a answer) ([]byte, error) {
	sum := sha256.Sum256(body)
	payloadHash := string(appendHex(scratch[:0], sum[:]))
	maxAttempts := c.retryer.MaxAttempts()
	releaseRetry := func(error) error { return nil }
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return scratch, operationError(operation, err)
		}
		releaseAttempt, err := c.attemptToken(ctx)
		if err != nil {
			return scratch, operationError(operation, fmt.Errorf("failed to get retry Send token, %w", err))
		}
		scratch, err = c.attempt(ctx, operation, body, payloadHash, scratch, a)
		_ = releaseRetry(err)
		_ = releaseAttempt(err)
		if err == nil {
			return scratch, nil
		}
		if !c.retryer.IsErrorRetryable(err) {
			return scratch, operationError(operation, err)
		}
		if maxAttempts > 0 && attempt >= maxAttempts {
			return scratch, operationError(operation, &retry.MaxAttemptsError{Attempt: attempt, Err: err})
		}
		var tokenErr error
		if releaseRetry, tokenErr = c.retryer.GetRetryToken(ctx, err); tokenErr != nil {
			return scratch, operationError(operation, errors.Join(err, tokenErr))
		}
		delay, err := c.retryer.RetryDelay(attempt, err)
		if err != nil {
			return scratch, operationError(operation, err)
		}
		if err := sleep(ctx, delay); err != nil {
			return scratch, operationError(operation, &aws.RequestCanceledError{Err: err})
		}
	}
}

// attemptToken is the retryer's token for an attempt, as the SDK's retry
// middleware takes it (a retryer of before RetryerV2 has GetInitialToken).
func (c *Client) attemptToken(ctx context.Context) (func(error) error, error) {
	if r, ok := c.retryer.(aws.RetryerV2); ok {
		return r.GetAttemptToken(ctx)
	}
	return c.retryer.GetInitialToken(), nil
}

// operationError wraps err as the SDK wraps an operation's errors.
func operationError(operation string, err error) error {
	return &smithy.OperationError{ServiceID: dynamodb.ServiceID, OperationName: operation, Err: err}
}

// sdkError is the error inside the SDK's OperationError: a replayed answer's
// error as the SDK's deserialiser and its response middleware made it
// (a *awshttp.ResponseError around the typed error), for call to retry and
// wrap as the SDK's retry middleware would.
func sdkError(err error) error {
	var op *smithy.OperationError
	if errors.As(err, &op) {
		return op.Err
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var (
	contentType = []string{"application/x-amz-json-1.0"}
	identity    = []string{"identity"}
	targets     = map[string][]string{
		"TransactWriteItems": {"DynamoDB_20120810.TransactWriteItems"},
		"GetItem":            {"DynamoDB_20120810.GetItem"},
	}
)

// attempt sends the request once. A success returns nil; any other answer
// (or a success whose checksum does not match) goes to decode.
func (c *Client) attempt(ctx context.Context, operation string, body []byte, payloadHash string, scratch []byte, a answer) ([]byte, error) {
	creds, err := c.creds.Retrieve(ctx)
	if err != nil {
		return scratch, fmt.Errorf("failed to retrieve credentials: %w", err)
	}
	if c.conns != nil {
		return c.attemptOwn(ctx, operation, body, payloadHash, creds, scratch, a)
	}
	req := (&http.Request{
		Method: http.MethodPost, URL: c.url, Host: c.signer.host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":    contentType,
			"X-Amz-Target":    targets[operation],
			"Accept-Encoding": identity,
			"User-Agent":      c.userAgent,
		},
		ContentLength: int64(len(body)),
		Body:          io.NopCloser(bytes.NewReader(body)),
		GetBody:       func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil },
	}).WithContext(ctx)
	scratch = c.signer.sign(req, creds, payloadHash, time.Now(), scratch)
	return scratch, c.send(ctx, req, a)
}

// send sends req and reads its answer: nil for a success a read, else the
// SDK's reading of it (a.replay).
func (c *Client) send(ctx context.Context, req *http.Request, a answer) error {
	resp, err := c.http.Do(req)
	if err != nil {
		// As smithy-go's ClientHandler: a send error, or the context's end.
		if ctx.Err() != nil {
			return &smithy.CanceledError{Err: ctx.Err()}
		}
		return &smithyhttp.RequestSendError{Err: err}
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return &smithyhttp.RequestSendError{Err: fmt.Errorf("read the answer: %w", err)}
	}
	return c.answered(ctx, resp, body, a)
}

// attemptOwn is attempt over ddbwire's own connections: the request signed,
// written as HTTP/1.1 into scratch (its head, then body) and sent by
// c.conns.
func (c *Client) attemptOwn(ctx context.Context, operation string, body []byte, payloadHash string, creds aws.Credentials, scratch []byte, a answer) ([]byte, error) {
	target := targets[operation]
	amzDate, auth, scratch := c.signer.signature(c.url.EscapedPath(), int64(len(body)), contentType, target, creds, payloadHash, time.Now(), scratch)
	b := append(scratch[:0], "POST "...)
	b = append(b, c.uri...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, c.signer.host...)
	b = append(b, "\r\nUser-Agent: "...)
	b = append(b, c.userAgent[0]...)
	b = strconv.AppendInt(append(b, "\r\nContent-Length: "...), int64(len(body)), 10)
	b = append(b, "\r\nAccept-Encoding: identity\r\nAuthorization: "...)
	b = append(b, auth...)
	b = append(b, "\r\nContent-Type: "...)
	b = append(b, contentType[0]...)
	b = append(b, "\r\nX-Amz-Date: "...)
	b = append(b, amzDate...)
	if creds.SessionToken != "" {
		b = append(b, "\r\nX-Amz-Security-Token: "...)
		b = append(b, creds.SessionToken...)
	}
	b = append(b, "\r\nX-Amz-Target: "...)
	b = append(b, target[0]...)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	resp, respBody, err := c.conns.roundTrip(ctx, b, accepter{checkCRC: c.checkCRC, read: a.read})
	if err != nil {
		// As smithy-go's ClientHandler: a send error, or the context's end.
		if ctx.Err() != nil {
			return b, &smithy.CanceledError{Err: ctx.Err()}
		}
		return b, &smithyhttp.RequestSendError{Err: &url.Error{Op: "Post", URL: c.url.String(), Err: err}}
	}
	if resp == nil { // a success taken as it came (quick.go)
		return b, nil
	}
	_ = resp.Body.Close() // http.NoBody: the body is respBody, read to its end
	return b, c.answered(ctx, resp, respBody, a)
}

// answered reads an answer whose body was read: nil for a success a read,
// else the SDK's reading of it (a.replay).
func (c *Client) answered(ctx context.Context, resp *http.Response, body []byte, a answer) error {
	if resp.StatusCode/100 == 2 && c.checksumMatches(resp, body) && (a.read == nil || a.read(body)) {
		return nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return a.replay(ctx, resp)
}

// checksumMatches is the SDK's check of DynamoDB's X-Amz-Crc32 header,
// when the client makes it.
func (c *Client) checksumMatches(resp *http.Response, body []byte) bool {
	if !c.checkCRC {
		return true
	}
	h := resp.Header.Get("X-Amz-Crc32")
	if h == "" {
		return true
	}
	want, err := strconv.ParseUint(h, 10, 32)
	return err == nil && uint32(want) == crc32.ChecksumIEEE(body)
}
