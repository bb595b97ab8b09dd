package api_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/servetest"
)

// sendAsIs is a client codec that sends body whatever the request message,
// so that a real client of each protocol (its framing, its reading of the
// error) sends what a broken client would.
type sendAsIs struct {
	name string
	body []byte
}

func (c sendAsIs) Name() string                      { return c.name }
func (c sendAsIs) Marshal(any) ([]byte, error)       { return c.body, nil }
func (c sendAsIs) MarshalStable(any) ([]byte, error) { return c.body, nil }
func (c sendAsIs) IsBinary() bool                    { return c.name == "proto" }

// Unmarshal reads answers, and a gRPC error's details (always binary).
func (c sendAsIs) Unmarshal(b []byte, v any) error {
	if c.IsBinary() {
		return proto.Unmarshal(b, v.(proto.Message))
	}
	return protojson.Unmarshal(b, v.(proto.Message))
}

// A protocol is how a test client calls: Connect (POST), its GET form,
// gRPC or gRPC-Web.
type protocol struct {
	name string
	h2   bool // gRPC needs HTTP/2
	opts []connect.ClientOption
}

var protocols = []protocol{
	{name: "connect"},
	{name: "connect GET", opts: []connect.ClientOption{connect.WithHTTPGet()}},
	{name: "grpc", h2: true, opts: []connect.ClientOption{connect.WithGRPC()}},
	{name: "grpc-web", opts: []connect.ClientOption{connect.WithGRPCWeb()}},
}

// parserWords are what the caller must never read in a message: the
// parser's own wording, Go types, protojson's JSON names.
var parserWords = []string{"proto:", "unmarshal", "syntax error", "wire-format", "minVersion", "\u00a0", "*v1.", "pointledgerv1", "%!"}

// Every malformed body is refused invalid_argument with reason
// MALFORMED_REQUEST and a message that says what is wrong in the caller's
// words, on every protocol, and writes nothing; a content type or
// encoding that no codec reads is UNSUPPORTED_MEDIA_TYPE (issue 22, item 3).
func TestMalformedRequestsOverEveryProtocol(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.grant(t, "alice", "seed", "100")
	if err := s.srv.History.Rebuild(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	before := s.srv.Snapshot()

	type kind struct {
		name      string
		procedure string // a GET needs a method without side effects
		codec     string
		body      string
		reason    string
		message   string // a part of the message the caller must read
	}
	purchase := pointledgerv1connect.LedgerServicePurchaseProcedure
	history := pointledgerv1connect.LedgerServiceListHistoryProcedure
	reconcile := pointledgerv1connect.AdminServiceReconcileProcedure
	createEndpoint := pointledgerv1connect.WebhookServiceCreateWebhookEndpointProcedure
	listEndpoints := pointledgerv1connect.WebhookServiceListWebhookEndpointsProcedure
	kinds := []kind{
		{"unknown field", purchase, "json", `{"user_id":"alice","amount":"1","request_id":"m1","bogus":1}`, api.ReasonMalformedRequest,
			`request body is not valid JSON for pointledger.v1.PurchaseRequest: unknown field "bogus" (line 1, column`},
		{"only an unknown field", purchase, "json", `{"bogus":1}`, api.ReasonMalformedRequest, // as docs/design.md shows it
			`request body is not valid JSON for pointledger.v1.PurchaseRequest: unknown field "bogus" (line 1, column 2)`},
		{"unknown field of a read", history, "json", `{"user_id":"alice","bogus":1}`, api.ReasonMalformedRequest,
			`pointledger.v1.ListHistoryRequest: unknown field "bogus"`},
		{"truncated JSON", purchase, "json", `{"user_id":"alice","amount":"1","request_id":"m`, api.ReasonMalformedRequest,
			"the JSON ends before the object does"},
		{"amount as a number", purchase, "json", `{"user_id":"alice","amount":1,"request_id":"m2"}`, api.ReasonMalformedRequest,
			`field "amount" must be a string, not 1`},
		{"min_version not a number", history, "json", `{"user_id":"alice","min_version":"soon"}`, api.ReasonMalformedRequest,
			`field "min_version" must be an integer, not "soon"`},
		{"time not a time", history, "json", `{"user_id":"alice","start_time":"yesterday"}`, api.ReasonMalformedRequest,
			`field "start_time" must be an RFC 3339 time string in UTC such as "2026-01-02T15:04:05Z", not "yesterday"`},
		{"garbage bytes", purchase, "proto", "\xff\xff\xff\xff garbage", api.ReasonMalformedRequest,
			"request body is not the protobuf binary encoding of pointledger.v1.PurchaseRequest"},
		{"garbage bytes of a read", history, "proto", "\xff\xff\xff\xff garbage", api.ReasonMalformedRequest,
			"not the protobuf binary encoding of pointledger.v1.ListHistoryRequest"},
		{"unknown field of a stream", reconcile, "json", `{"bogus":1}`, api.ReasonMalformedRequest,
			`pointledger.v1.ReconcileRequest: unknown field "bogus"`},
		{"garbage bytes of a stream", reconcile, "proto", "\xff\xff\xff\xff garbage", api.ReasonMalformedRequest,
			"not the protobuf binary encoding of pointledger.v1.ReconcileRequest"},
		{"unknown field of a webhook call", createEndpoint, "json", `{"url":"https://crm.example/hook","secret":"whsec_mine"}`, api.ReasonMalformedRequest,
			`pointledger.v1.CreateWebhookEndpointRequest: unknown field "secret"`},
		{"event_types not a list", createEndpoint, "json", `{"url":"https://crm.example/hook","event_types":"*"}`, api.ReasonMalformedRequest,
			`CreateWebhookEndpointRequest: field "event_types" must be a list of strings, not "*" (line 1, column 49)`},
		{"garbage bytes of a webhook read", listEndpoints, "proto", "\xff\xff\xff\xff garbage", api.ReasonMalformedRequest,
			"not the protobuf binary encoding of pointledger.v1.ListWebhookEndpointsRequest"},
		{"content type xml", purchase, "xml", `<purchase/>`, api.ReasonUnsupportedMediaType, `xml" is not one ledgerd reads`},
		{"content type xml of a read", history, "xml", `<history/>`, api.ReasonUnsupportedMediaType, `xml" is not one ledgerd reads`},
	}
	for _, k := range kinds {
		for _, p := range protocols {
			if p.name == "connect GET" && k.procedure != history {
				continue // the GET form is for methods without side effects
			}
			t.Run(k.name+" over "+p.name, func(t *testing.T) {
				t.Parallel()
				code, reason, message := callWith(t, s.srv, p, k.procedure, sendAsIs{name: k.codec, body: []byte(k.body)})
				checkRefusal(t, code, reason, message, k.reason, k.message)
			})
		}
	}
	// An empty body: a JSON request is an object, at least {}. (gRPC and
	// gRPC-Web frame an empty message as zero bytes, which is the empty
	// message: refused for what it lacks, as {} is.)
	for _, p := range protocols[:2] {
		t.Run("empty body over "+p.name, func(t *testing.T) {
			t.Parallel()
			code, reason, message := callWith(t, s.srv, p, history, sendAsIs{name: "json"})
			checkRefusal(t, code, reason, message, api.ReasonMalformedRequest, "request body is empty: pointledger.v1.ListHistoryRequest is a JSON object")
		})
	}
	// Nothing written, not even a refusal record: the parent's cleanup
	// runs when its parallel subtests are done.
	t.Cleanup(func() {
		added, changed, removed := before.Diff(s.srv.Snapshot())
		if len(added)+len(changed)+len(removed) != 0 {
			t.Errorf("malformed requests wrote: added %v, changed %v, removed %v", added, changed, removed)
		}
	})
}

// callWith calls procedure with codec over protocol p, and returns the
// code, reason and message of its refusal.
func callWith(tb testing.TB, srv *servetest.Server, p protocol, procedure string, codec sendAsIs) (connect.Code, string, string) {
	tb.Helper()
	httpClient := srv.HTTP
	if p.h2 {
		httpClient = srv.H2C
	}
	opts := append([]connect.ClientOption{connect.WithCodec(codec)}, p.opts...)
	if procedure == pointledgerv1connect.LedgerServiceListHistoryProcedure {
		opts = append(opts, connect.WithIdempotency(connect.IdempotencyNoSideEffects))
	}
	var err error
	if procedure == pointledgerv1connect.AdminServiceReconcileProcedure { // a server stream
		c := connect.NewClient[pb.ReconcileRequest, pb.ReconcileResponse](httpClient, srv.URL+procedure, opts...)
		stream, callErr := c.CallServerStream(context.Background(), connect.NewRequest(&pb.ReconcileRequest{}))
		if err = callErr; err == nil {
			for stream.Receive() {
			}
			err = stream.Err()
			_ = stream.Close()
		}
	} else {
		c := connect.NewClient[pb.ListHistoryRequest, pb.ListHistoryResponse](httpClient, srv.URL+procedure, opts...)
		_, err = c.CallUnary(context.Background(), connect.NewRequest(&pb.ListHistoryRequest{}))
	}
	if err == nil {
		tb.Fatalf("%s over %s: answered, want a refusal", procedure, p.name)
	}
	code, info := servetest.ErrorInfo(err)
	message := err.Error()
	if ce := new(connect.Error); errors.As(err, &ce) {
		message = ce.Message()
	}
	return code, info.GetReason(), message
}

func checkRefusal(tb testing.TB, code connect.Code, reason, message, wantReason, wantMessage string) {
	tb.Helper()
	if code != connect.CodeInvalidArgument || reason != wantReason {
		tb.Errorf("refused %v/%q (%s), want invalid_argument/%s", code, reason, message, wantReason)
	}
	if !strings.Contains(message, wantMessage) {
		tb.Errorf("message %q, want it to say %q", message, wantMessage)
	}
	for _, w := range parserWords {
		if strings.Contains(message, w) {
			tb.Errorf("message %q has the parser's %q", message, w)
		}
	}
}

// Reconcile answers with a stream, so over Connect it takes
// application/connect+json, not the unary application/json: a caller who
// sends the latter (as curl of a unary call does) is told which to send,
// not the types of a unary call.
func TestAStreamsContentTypeIsNamed(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	for _, tc := range []struct{ procedure, want string }{
		{pointledgerv1connect.AdminServiceReconcileProcedure, "send application/connect+json or application/connect+proto"},
		{pointledgerv1connect.LedgerServicePurchaseProcedure, "send application/json or application/proto"},
	} {
		req, err := http.NewRequest(http.MethodPost, s.srv.URL+tc.procedure, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/plain")
		res, err := s.srv.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if !strings.Contains(string(body), tc.want) || !strings.Contains(string(body), api.ReasonUnsupportedMediaType) {
			t.Errorf("%s with text/plain: %s %s, want %q and %s", tc.procedure, res.Status, body, tc.want, api.ReasonUnsupportedMediaType)
		}
	}
}
