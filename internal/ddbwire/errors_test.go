package ddbwire_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/pointledger/pointledger/internal/ddbhttp"
	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/throttle"
)

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

// sameError fails the test unless got is the error the SDK gave (want):
// the same message but for the request id, the same API error type, code
// and message, the same cancellation reasons with their items.
func sameError(t *testing.T, got, want error) {
	t.Helper()
	sameErrorOf(t, "TransactWriteItems", got, want)
}

// sameErrorOf is sameError for an operation's errors.
func sameErrorOf(t *testing.T, operation string, got, want error) {
	t.Helper()
	if want == nil || got == nil {
		t.Fatalf("ddbwire: %v; the SDK: %v (want an error from both)", got, want)
	}
	requestID := regexp.MustCompile(`RequestID: [^,]*,`)
	if g, w := requestID.ReplaceAllString(got.Error(), ""), requestID.ReplaceAllString(want.Error(), ""); g != w {
		t.Errorf("ddbwire's error\n%s\nthe SDK's\n%s", g, w)
	}
	var gotAPI, wantAPI smithy.APIError
	if !errors.As(got, &gotAPI) || !errors.As(want, &wantAPI) {
		t.Fatalf("not API errors: %v; %v", got, want)
	}
	if reflect.TypeOf(gotAPI) != reflect.TypeOf(wantAPI) || gotAPI.ErrorCode() != wantAPI.ErrorCode() || gotAPI.ErrorMessage() != wantAPI.ErrorMessage() {
		t.Errorf("ddbwire's %T %s %q, the SDK's %T %s %q", gotAPI, gotAPI.ErrorCode(), gotAPI.ErrorMessage(), wantAPI, wantAPI.ErrorCode(), wantAPI.ErrorMessage())
	}
	var gotCancel, wantCancel *types.TransactionCanceledException
	if errors.As(want, &wantCancel) {
		if !errors.As(got, &gotCancel) {
			t.Fatalf("ddbwire's error is no TransactionCanceledException: %v", got)
		}
		if !reflect.DeepEqual(gotCancel.CancellationReasons, wantCancel.CancellationReasons) {
			t.Errorf("reasons %+v, the SDK's %+v", gotCancel.CancellationReasons, wantCancel.CancellationReasons)
		}
	}
	var op *smithy.OperationError
	if !errors.As(got, &op) || op.Operation() != operation || op.Service() != dynamodb.ServiceID {
		t.Errorf("not the SDK's operation error: %#v", got)
	}
}

// TestErrorsMatchSDKOnDynamoDBLocal: answers DynamoDB Local really gives
// (a cancelled transaction with the item that failed its condition, a
// missing table, a request DynamoDB refuses) are the same errors through
// ddbwire as through the SDK client, and a transaction that commits
// through ddbwire is on the table.
func TestErrorsMatchSDKOnDynamoDBLocal(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	ctx := context.Background()
	db := env.Client
	wire, err := ddbwire.New(ctx, db, ddbwire.Options{HTTPClient: ddbhttp.Unwrap(db.Options().HTTPClient)})
	if err != nil {
		t.Fatal(err)
	}
	own := ownConns(t, db, ddbhttp.Unwrap(db.Options().HTTPClient))
	table := aws.String(env.Ledger)
	existing := map[string]types.AttributeValue{"PK": str("U#ddbwire"), "SK": str("ACCOUNT"), "balance": &types.AttributeValueMemberN{Value: "5"}}
	put := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{TableName: table, Item: existing}}}}
	if _, err := wire.TransactWriteItems(ctx, put); err != nil {
		t.Fatalf("a put through ddbwire: %v", err)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: map[string]types.AttributeValue{"PK": str("U#ddbwire"), "SK": str("ACCOUNT")}, ConsistentRead: aws.Bool(true)})
	if err != nil || !reflect.DeepEqual(out.Item, existing) {
		t.Fatalf("after the put, item %v (%v), want %v", out.Item, err, existing)
	}

	cases := []struct {
		name string
		in   *dynamodb.TransactWriteItemsInput
	}{
		{"condition failed with the item", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: table, Item: map[string]types.AttributeValue{"PK": str("U#other"), "SK": str("ACCOUNT")}}},
			{Put: &types.Put{TableName: table, Item: existing, ConditionExpression: aws.String("attribute_not_exists(PK)"),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
		}}},
		{"condition failed without the item", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{ConditionCheck: &types.ConditionCheck{TableName: table, Key: map[string]types.AttributeValue{"PK": str("U#ddbwire"), "SK": str("ACCOUNT")},
				ConditionExpression: aws.String("balance > :n"), ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "10"}}}},
		}}},
		{"missing table", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: aws.String(env.Prefix + "nosuchtable"), Item: existing}},
		}}},
		{"two actions on one item", &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: table, Item: existing}}, {Put: &types.Put{TableName: table, Item: existing}},
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, want := db.TransactWriteItems(ctx, tc.in)
			_, got := wire.TransactWriteItems(ctx, tc.in)
			sameError(t, got, want)
			_, got = own.TransactWriteItems(ctx, tc.in)
			sameError(t, got, want)
		})
	}
}

// script is a fake DynamoDB for the answers DynamoDB Local never gives
// (throttling, 5xx, TransactionConflict): it answers the n-th request with
// answers[n], the last one again after the end, and counts the requests.
type script struct {
	answers []answer
	n       atomic.Int64
}

type answer struct {
	status int
	body   string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := min(int(s.n.Add(1)-1), len(s.answers)-1)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", fmt.Sprint("fake-", i))
	w.WriteHeader(s.answers[i].status)
	_, _ = w.Write([]byte(s.answers[i].body))
}

var (
	ok            = answer{http.StatusOK, `{}`}
	throttled     = answer{http.StatusBadRequest, `{"__type":"com.amazonaws.dynamodb.v20120810#ThrottlingException","message":"Throughput exceeds the current capacity for one or more global secondary indexes."}`}
	exceeded      = answer{http.StatusBadRequest, `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded."}`}
	internal      = answer{http.StatusInternalServerError, `{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"Internal server error"}`}
	conflict      = answer{http.StatusBadRequest, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [None, TransactionConflict]","CancellationReasons":[{"Code":"None"},{"Code":"TransactionConflict","Message":"Transaction is ongoing for the item"}]}`}
	throttledItem = answer{http.StatusBadRequest, `{"__type":"com.amazonaws.dynamodb.v20120810#TransactionCanceledException","Message":"Transaction cancelled, please refer cancellation reasons for specific reasons [ThrottlingError]","CancellationReasons":[{"Code":"ThrottlingError","Message":"Throughput exceeds the current capacity of your table or index."}]}`}
)

// TestRetriesAndErrorsMatchSDK runs each script against the SDK client and
// against ddbwire (on a fake server: DynamoDB Local throttles nothing and
// never fails with a 5xx): the same outcome, the same number of requests
// (the SDK's standard retryer: 3 attempts, throttling and 5xx retried,
// cancellations not), the same errors; and ddbwire on its own connections
// the same again.
func TestRetriesAndErrorsMatchSDK(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		answers   []answer
		requests  int64
		succeeds  bool
		throttled bool // throttle.Refused or throttle.Throttled, as the write path reads it
	}{
		{"throttled twice then committed", []answer{throttled, throttled, ok}, 3, true, false},
		{"5xx then committed", []answer{internal, ok}, 2, true, false},
		{"throttled every time", []answer{throttled}, 3, false, true},
		{"throughput exceeded every time", []answer{exceeded}, 3, false, true},
		{"5xx every time", []answer{internal}, 3, false, false},
		{"transaction conflict", []answer{conflict}, 1, false, false},
		{"an item throttled", []answer{throttledItem}, 1, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Its own input: the SDK writes a ClientRequestToken into it.
			in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"PK": str("a")}}}}}
			var errs [3]error
			for i := range errs {
				s := &script{answers: tc.answers}
				srv := httptest.NewServer(s)
				defer srv.Close()
				db := sdkClient(srv.URL, ddbhttp.Client(), credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""))
				call := db.TransactWriteItems
				if i > 0 {
					wire, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: ddbhttp.Client(), OwnConns: i == 2})
					if err != nil {
						t.Fatal(err)
					}
					call = wire.TransactWriteItems
				}
				_, errs[i] = call(context.Background(), in)
				if got := s.n.Load(); got != tc.requests {
					t.Errorf("client %d: %d requests, want %d", i, got, tc.requests)
				}
				if (errs[i] == nil) != tc.succeeds {
					t.Errorf("client %d: %v, want success %v", i, errs[i], tc.succeeds)
				}
				if got := throttle.Refused(errs[i]) || throttle.Throttled(errs[i]); got != tc.throttled {
					t.Errorf("client %d: throttled %v, want %v: %v", i, got, tc.throttled, errs[i])
				}
			}
			if tc.succeeds {
				return
			}
			for _, err := range errs[1:] {
				sameError(t, err, errs[0])
				var maxAttempts *retry.MaxAttemptsError
				if errors.As(errs[0], &maxAttempts) != errors.As(err, &maxAttempts) {
					t.Errorf("MaxAttemptsError in the SDK's %v, in ddbwire's %v", errs[0], err)
				}
			}
		})
	}
}

// A context that ends while DynamoDB has not answered ends the call with
// the context's error (a fake server that never answers: no emulator
// hangs on purpose).
func TestContextDeadline(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	for _, wire := range []*ddbwire.Client{leanClient(t, ddbhttp.Client(), srv.URL), ownConns(t, sdkClient(srv.URL, ddbhttp.Client(), credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")), ddbhttp.Client())} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"PK": str("a")}}}}}
		_, err := wire.TransactWriteItems(ctx, in)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("own connections %v: %v, want the context's deadline", wire.OwnConns(), err)
		}
	}
}

// A success whose X-Amz-Crc32 does not match its body (a fake server:
// DynamoDB Local's header does not match its error bodies either, so the
// store's tests turn the check off) ends as it ends through the SDK client
// with the check on: ddbwire hands such an answer to the SDK's
// deserialiser, which makes the check. (With SDK v1.73.1 that end is a
// success: the check fails in the body's Close, whose error the SDK drops.)
func TestChecksumMismatchAsTheSDK(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amz-Crc32", "12345")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"PK": str("a")}}}}}
	checked := func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = false }
	db := dynamodb.New(sdkClient(srv.URL, ddbhttp.Client(), credentials.NewStaticCredentialsProvider("AKID", "SECRET", "")).Options(), checked)
	_, want := db.TransactWriteItems(context.Background(), in)
	sdkRequests := requests.Swap(0)
	for _, own := range []bool{false, true} {
		wire, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: ddbhttp.Client(), OwnConns: own})
		if err != nil || wire.OwnConns() != own {
			t.Fatal(err, own)
		}
		_, got := wire.TransactWriteItems(context.Background(), in)
		if (got == nil) != (want == nil) {
			t.Errorf("ddbwire (own connections %v): %v; the SDK: %v", own, got, want)
		}
		if got != nil {
			requestID := regexp.MustCompile(`RequestID: [^,]*,`)
			if g, w := requestID.ReplaceAllString(got.Error(), ""), requestID.ReplaceAllString(want.Error(), ""); g != w {
				t.Errorf("ddbwire's error %s, the SDK's %s", g, w)
			}
		}
		if n := requests.Swap(0); n != sdkRequests {
			t.Errorf("own connections %v: %d requests, the SDK %d", own, n, sdkRequests)
		}
		wire.CloseIdleConnections()
	}
	t.Logf("with a checksum that does not match: %d requests, %v", sdkRequests, want)
}

// A transaction given without a ClientRequestToken gets one, as through
// the SDK client, and every attempt carries the same (so that DynamoDB
// answers a retry after a lost answer with the first outcome).
func TestOneTokenForEveryAttempt(t *testing.T) {
	t.Parallel()
	rec := &recorder{status: http.StatusInternalServerError, answer: internal.body}
	wire := leanClient(t, rec, "http://127.0.0.1:1")
	in := &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{{Put: &types.Put{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"PK": str("a")}}}}}
	if _, err := wire.TransactWriteItems(context.Background(), in); err == nil {
		t.Fatal("a 500 every time, and no error")
	}
	tokens := map[string]int{}
	for _, body := range rec.bodies {
		var sent struct{ ClientRequestToken string }
		if err := json.Unmarshal(body, &sent); err != nil {
			t.Fatal(err)
		}
		tokens[sent.ClientRequestToken]++
	}
	if len(rec.bodies) != 3 || len(tokens) != 1 || tokens[""] != 0 || in.ClientRequestToken == nil || tokens[*in.ClientRequestToken] != 3 {
		t.Errorf("%d attempts with tokens %v, the input's %v; want 3 with one token, the input's", len(rec.bodies), tokens, in.ClientRequestToken)
	}
}
