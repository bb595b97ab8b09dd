// Package ddbhttp holds the HTTP client that ledgerd, the tests and the load
// test's baselines all use to reach DynamoDB, so that they pay the same for it.
package ddbhttp

import (
	"bytes"
	"io"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// Client is the HTTP client for DynamoDB: the SDK's, except that it keeps
// up to 1024 idle connections to a host instead of 10. With more than 10
// requests in flight the SDK's default closes a connection after each answer
// and opens another for the next request, which costs DynamoDB Local (and the
// load test's baselines, which use this client too) a TCP handshake and a
// server thread per request.
//
// It stays the SDK's own type, so that the SDK still applies what it
// applies to its clients (a CA bundle, its timeouts); the client that sends
// is then wrapped in OneWrite, in the service's options.
func Client() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = 1024
		t.MaxIdleConnsPerHost = 1024
	})
}

// Doer is what the SDK sends its requests with (its HTTPClient).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// MaxBufferedBody is the largest request body OneWrite reads into memory
// before the request goes: a TransactWriteItems of 100 items of a few
// hundred bytes fits.
const MaxBufferedBody = 256 << 10

// OneWrite sends each request through next with its headers and body in one
// write. net/http writes the headers, then the body, in two writes (two
// system calls, two TCP segments for DynamoDB to read) unless the body is
// one it knows to be in memory; the SDK's body is a reader of its own, so
// every DynamoDB call cost ledgerd a write more than it needs (issue 37). A
// body of a known length up to MaxBufferedBody is read into memory first;
// the SDK rewinds its own body for a retry and builds the request again.
//
//	dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.HTTPClient = ddbhttp.OneWrite(o.HTTPClient) })
func OneWrite(next Doer) Doer {
	if _, ok := next.(oneWrite); ok {
		return next
	}
	return oneWrite{next: next}
}

type oneWrite struct{ next Doer }

func (c oneWrite) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength > 0 && r.ContentLength <= MaxBufferedBody {
		body := make([]byte, r.ContentLength)
		_, err := io.ReadFull(r.Body, body)
		if cerr := r.Body.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return c.next.Do(r)
}

// Unwrap is the client OneWrite wraps, or d itself: for a sender whose
// bodies are in memory already (internal/ddbwire), which OneWrite would
// copy again.
func Unwrap(d Doer) Doer {
	if w, ok := d.(oneWrite); ok {
		return w.next
	}
	return d
}
