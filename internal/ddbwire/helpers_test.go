package ddbwire_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/dynamotest"
)

// TestMain starts DynamoDB Local for the tests that need it (errors_test.go).
func TestMain(m *testing.M) { dynamotest.MainWithoutStreams(m) }

// recorder is an HTTP client that keeps every request it is given (with
// its body) and answers each with a canned answer: no network.
type recorder struct {
	mu       sync.Mutex
	requests []*http.Request
	bodies   [][]byte
	status   int
	answer   string
}

func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	_ = req.Body.Close()
	r.mu.Lock()
	r.requests = append(r.requests, req)
	r.bodies = append(r.bodies, body)
	r.mu.Unlock()
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	return &http.Response{
		StatusCode: status, Status: http.StatusText(status), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Requestid": {"recorded"}},
		Body:          io.NopCloser(strings.NewReader(r.answer)),
		ContentLength: int64(len(r.answer)),
		Request:       req,
	}, nil
}

func (r *recorder) last(t *testing.T) (*http.Request, []byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.requests) == 0 {
		t.Fatal("no request was sent")
	}
	return r.requests[len(r.requests)-1], r.bodies[len(r.bodies)-1]
}

// sdkClient is a DynamoDB client as ledgerd builds one for an endpoint,
// sending through doer, with retries at no delay.
func sdkClient(endpoint string, doer ddbwire.Doer, creds aws.CredentialsProvider) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		HTTPClient:   doer,
		Region:       "eu-west-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  creds,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })
		}),
		DisableValidateResponseChecksum: true,
	})
}
