// Package ddbhttp holds the HTTP client that ledgerd, the tests and the load
// test's baselines all use to reach DynamoDB, so that they pay the same for it.
package ddbhttp

import (
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// Client is the HTTP client for DynamoDB: the SDK's, except that it keeps
// up to 1024 idle connections to a host instead of 10. With more than 10
// requests in flight the SDK's default closes a connection after each answer
// and opens another for the next request, which costs DynamoDB Local (and the
// load test's baselines, which use this client too) a TCP handshake and a
// server thread per request.
func Client() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns = 1024
		t.MaxIdleConnsPerHost = 1024
	})
}
