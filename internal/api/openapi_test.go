package api_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	validationerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/pb33f/libopenapi/orderedmap"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	_ "github.com/pointledger/pointledger/gen/pointledger/v1" // registers the package's descriptors
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/dispatch/memory"
	"github.com/pointledger/pointledger/internal/servetest"
)

// specFile is the OpenAPI description `make generate` writes from the protos
// (proto/buf.gen.openapi.yaml); `make generate-check` keeps it fresh. These
// tests check it says what ledgerd serves.
const specFile = "../../openapi/pointledger.v1.openapi.yaml"

const apiPackage = "pointledger.v1"

func loadSpec(tb testing.TB) (libopenapi.Document, *v3.Document) {
	tb.Helper()
	b, err := os.ReadFile(specFile)
	if err != nil {
		tb.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(b)
	if err != nil {
		tb.Fatalf("parse %s: %v", specFile, err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		tb.Fatalf("build %s: %v", specFile, err)
	}
	return doc, &model.Model
}

// procedures are the API's RPCs by their Connect path, from the descriptors
// the generated code registers: whatever the protos have now.
func procedures(tb testing.TB) map[string]protoreflect.MethodDescriptor {
	tb.Helper()
	out := make(map[string]protoreflect.MethodDescriptor)
	protoregistry.GlobalFiles.RangeFilesByPackage(apiPackage, func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			svc := fd.Services().Get(i)
			for j := range svc.Methods().Len() {
				m := svc.Methods().Get(j)
				out["/"+string(svc.FullName())+"/"+string(m.Name())] = m
			}
		}
		return true
	})
	if len(out) == 0 {
		tb.Fatalf("no services registered in package %s", apiPackage)
	}
	return out
}

func TestOpenAPIIsValid(t *testing.T) {
	t.Parallel()
	doc, _ := loadSpec(t)
	if got := doc.GetVersion(); got != "3.1.0" {
		t.Errorf("openapi: %q, want 3.1.0", got)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		t.Errorf("not valid OpenAPI %s:\n%s", doc.GetVersion(), describe(verrs))
	}
}

// Every RPC has its path, every path is an RPC; unary ones are a POST of
// their request answering their response or a Connect error, and a GET too
// exactly when they have no side effects (connect-go serves GET for those).
// Streaming ones are left out: a path without operations.
func TestOpenAPIDescribesEveryProcedure(t *testing.T) {
	t.Parallel()
	_, spec := loadSpec(t)
	procs := procedures(t)
	for path := range spec.Paths.PathItems.KeysFromOldest() {
		if _, ok := procs[path]; !ok {
			t.Errorf("path %s is no procedure of %s", path, apiPackage)
		}
	}
	for path, m := range procs {
		item, ok := spec.Paths.PathItems.Get(path)
		if !ok {
			t.Errorf("%s: no path", path)
			continue
		}
		ops := item.GetOperations()
		if m.IsStreamingClient() || m.IsStreamingServer() {
			if ops.Len() != 0 {
				t.Errorf("%s streams, but has operations", path)
			}
			continue
		}
		want := []string{"post"}
		if m.Options().(*descriptorpb.MethodOptions).GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS {
			want = []string{"get", "post"}
		}
		got := slices.Sorted(ops.KeysFromOldest())
		if !slices.Equal(got, want) {
			t.Errorf("%s: operations %v, want %v", path, got, want)
		}
		if item.Post != nil {
			checkOperation(t, path, item.Post, m)
		}
	}
}

// checkOperation checks op takes m's request and answers its response or a
// Connect error, under the document's security.
func checkOperation(tb testing.TB, path string, op *v3.Operation, m protoreflect.MethodDescriptor) {
	tb.Helper()
	const schemas = "#/components/schemas/"
	if op.RequestBody == nil {
		tb.Errorf("%s: no request body", path)
	} else if got, want := jsonSchemaRef(op.RequestBody.Content), schemas+string(m.Input().FullName()); got != want {
		tb.Errorf("%s: request %q, want %q", path, got, want)
	}
	if ok := op.Responses.Codes.GetOrZero("200"); ok == nil {
		tb.Errorf("%s: no 200 answer", path)
	} else if got, want := jsonSchemaRef(ok.Content), schemas+string(m.Output().FullName()); got != want {
		tb.Errorf("%s: answer %q, want %q", path, got, want)
	}
	if op.Responses.Default == nil {
		tb.Errorf("%s: no error answer", path)
	} else if got, want := jsonSchemaRef(op.Responses.Default.Content), schemas+"connect.error"; got != want {
		tb.Errorf("%s: error %q, want %q", path, got, want)
	}
	if op.Security != nil {
		tb.Errorf("%s: security of its own; every call takes the bearer token", path)
	}
}

// jsonSchemaRef is the reference of content's application/json schema.
func jsonSchemaRef(content *orderedmap.Map[string, *v3.MediaType]) string {
	if content == nil {
		return ""
	}
	mt := content.GetOrZero("application/json")
	if mt == nil || mt.Schema == nil {
		return ""
	}
	return mt.Schema.GetReference()
}

// Every call carries `Authorization: Bearer <token>`.
func TestOpenAPIRequiresBearer(t *testing.T) {
	t.Parallel()
	_, spec := loadSpec(t)
	var names []string
	for name, s := range spec.Components.SecuritySchemes.FromOldest() {
		if s.Type == "http" && strings.EqualFold(s.Scheme, "bearer") {
			names = append(names, name)
		}
	}
	if len(names) != 1 {
		t.Fatalf("HTTP bearer schemes %v, want one", names)
	}
	if len(spec.Security) != 1 || spec.Security[0].Requirements.Len() != 1 {
		t.Fatalf("security: %d requirements, want %s alone", len(spec.Security), names[0])
	}
	if _, ok := spec.Security[0].Requirements.Get(names[0]); !ok {
		t.Errorf("security does not require %s", names[0])
	}
}

// The messages' schemas have the fields of the messages as ledgerd's codec
// writes them (UseProtoNames): every field by its proto name, nothing else;
// 64-bit integers may be strings, which is how they are written.
func TestOpenAPIMessagesUseProtoNames(t *testing.T) {
	t.Parallel()
	_, spec := loadSpec(t)
	var messages []protoreflect.MessageDescriptor
	protoregistry.GlobalFiles.RangeFilesByPackage(apiPackage, func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Messages().Len() {
			messages = append(messages, fd.Messages().Get(i))
		}
		return true
	})
	for _, md := range messages {
		proxy, ok := spec.Components.Schemas.Get(string(md.FullName()))
		if !ok {
			t.Errorf("%s: no schema", md.FullName())
			continue
		}
		s := proxy.Schema()
		props := s.Properties
		if props == nil { // a message without fields
			props = orderedmap.New[string, *base.SchemaProxy]()
		}
		var want []string
		for i := range md.Fields().Len() {
			f := md.Fields().Get(i)
			want = append(want, string(f.Name()))
			p := props.GetOrZero(string(f.Name()))
			if p == nil {
				continue
			}
			if slices.Contains(int64Kinds, f.Kind()) {
				if types := itemSchema(p, f).Type; !slices.Contains(types, "string") {
					t.Errorf("%s.%s: type %v, without string", md.Name(), f.Name(), types)
				}
			}
		}
		got := slices.Collect(props.KeysFromOldest())
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: properties %v, want %v", md.FullName(), got, want)
		}
	}
}

// ledgerd's codec writes every field without presence, its default too
// (EmitDefaultValues): the schema of each message an answer carries
// requires exactly those, so that a generated client need not check them.
// A request's schema requires nothing: a client leaves out what it likes.
func TestOpenAPIRequiresWhatAnswersAlwaysHave(t *testing.T) {
	t.Parallel()
	_, spec := loadSpec(t)
	var answers, requests []protoreflect.MessageDescriptor
	for _, m := range procedures(t) {
		answers = reachable(answers, m.Output())
		requests = reachable(requests, m.Input())
	}
	if len(answers) == 0 || len(requests) == 0 {
		t.Fatalf("%d answer and %d request messages, want some of each", len(answers), len(requests))
	}
	for _, md := range answers {
		var want []string
		for i := range md.Fields().Len() {
			if f := md.Fields().Get(i); !f.HasPresence() {
				want = append(want, string(f.Name()))
			}
		}
		if got := schemaOf(t, spec, md).Required; !slices.Equal(got, want) {
			t.Errorf("%s: required %v, want %v", md.FullName(), got, want)
		}
	}
	for _, md := range requests {
		if slices.Contains(answers, md) {
			t.Errorf("%s is both a request's and an answer's: its schema cannot say both", md.FullName())
		} else if got := schemaOf(t, spec, md).Required; len(got) != 0 {
			t.Errorf("%s, a request's message: required %v, want none", md.FullName(), got)
		}
	}
}

// reachable adds md and the messages of its fields, those of the API's
// package (others, as Timestamp, have JSON of their own), to seen. It
// repeats openapirefine's addReachable on purpose: the test checks the
// tool's output with a walk of its own, so a message the tool's walk
// missed is not missed here too.
func reachable(seen []protoreflect.MessageDescriptor, md protoreflect.MessageDescriptor) []protoreflect.MessageDescriptor {
	if md.ParentFile().Package() != apiPackage || slices.Contains(seen, md) {
		return seen
	}
	if !md.IsMapEntry() {
		seen = append(seen, md)
	}
	for i := range md.Fields().Len() {
		f := md.Fields().Get(i)
		if f.IsMap() {
			f = f.MapValue()
		}
		if f.Message() != nil {
			seen = reachable(seen, f.Message())
		}
	}
	return seen
}

func schemaOf(tb testing.TB, spec *v3.Document, md protoreflect.MessageDescriptor) *base.Schema {
	tb.Helper()
	proxy, ok := spec.Components.Schemas.Get(string(md.FullName()))
	if !ok {
		tb.Fatalf("%s: no schema", md.FullName())
	}
	return proxy.Schema()
}

// ledgerd answers without Connect-Protocol-Version (TestOpenAPIMatchesAnswers
// sends none), so no operation requires it: a generated client would send
// it on every call. The GET form requires its message (connect-go refuses a
// GET without one), the request as JSON.
func TestOpenAPIParameters(t *testing.T) {
	t.Parallel()
	_, spec := loadSpec(t)
	procs := procedures(t)
	for path, item := range spec.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			var message *v3.Parameter
			for _, p := range op.Parameters {
				switch {
				case p.In == "header" && p.Required != nil && *p.Required:
					t.Errorf("%s %s: requires header %s", method, path, p.Name)
				case p.In == "query" && p.Name == "message":
					message = p
				}
			}
			if method != "get" {
				continue
			}
			if message == nil {
				t.Errorf("get %s: no message parameter", path)
				continue
			}
			if message.Required == nil || !*message.Required {
				t.Errorf("get %s: message is not required", path)
			}
			if got, want := jsonSchemaRef(message.Content), "#/components/schemas/"+string(procs[path].Input().FullName()); got != want {
				t.Errorf("get %s: message %q, want %q as JSON", path, got, want)
			}
		}
	}
}

// int64Kinds are the kinds protojson writes as strings.
var int64Kinds = []protoreflect.Kind{
	protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
	protoreflect.Uint64Kind, protoreflect.Fixed64Kind,
}

// itemSchema is the schema of one value of field f: its items if repeated.
func itemSchema(p *base.SchemaProxy, f protoreflect.FieldDescriptor) *base.Schema {
	s := p.Schema()
	if f.IsList() && s.Items != nil && s.Items.A != nil {
		return s.Items.A.Schema()
	}
	return s
}

// A round of documented requests to ledgerd's handlers, behind its
// authentication and without Connect-Protocol-Version (the description
// does not require it): each request is one the description allows, and
// each answer, success or error, is one it describes (messages allow no
// other fields, so a field named otherwise fails; they require the fields
// ledgerd always sends, so an answer without one fails, which
// checkRequired proves of the validator).
func TestOpenAPIMatchesAnswers(t *testing.T) {
	t.Parallel()
	_, spec := loadSpec(t)
	v := validator.NewValidatorFromV3Model(spec)
	creds := auth.GenerateDev()
	a, err := auth.NewAuthenticator(creds.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	srv := servetest.New(t, servetest.Options{Auth: a, Webhooks: memory.New(nil)})
	procs := procedures(t)
	endpointID := "" // the endpoint created, which later calls name as ENDPOINT_ID
	for _, c := range documentedCalls(creds.ServiceToken, creds.AdminToken) {
		c.body = strings.ReplaceAll(c.body, "ENDPOINT_ID", endpointID)
		newRequest := func() *http.Request {
			req, err := http.NewRequest(http.MethodPost, srv.URL+c.procedure, strings.NewReader(c.body))
			if c.get {
				q := url.Values{"encoding": {"json"}, "message": {c.body}}
				req, err = http.NewRequest(http.MethodGet, srv.URL+c.procedure+"?"+q.Encode(), nil)
			} else {
				req.Header.Set("Content-Type", "application/json")
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.token != "" {
				req.Header.Set("Authorization", "Bearer "+c.token)
			}
			return req
		}
		if ok, errs := v.ValidateHttpRequest(newRequest()); ok == c.outside {
			t.Errorf("%s: the description allows the request: %t, want %t\n%s", c.name, ok, !c.outside, describe(errs))
		}
		res, err := srv.HTTP.Do(newRequest())
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if want := cmp.Or(c.status, http.StatusOK); res.StatusCode != want {
			t.Errorf("%s: %s %s, want %d", c.name, res.Status, body, want)
		}
		res.Body = io.NopCloser(bytes.NewReader(body))
		if ok, errs := v.ValidateHttpResponse(newRequest(), res); !ok {
			t.Errorf("%s: the answer is not one the description describes:\n%s\n%s", c.name, body, describe(errs))
		}
		if res.StatusCode == http.StatusOK {
			checkRequired(t, v, c.name, procs[c.procedure].Output(), newRequest(), res, body)
		}
		var created struct {
			Endpoint struct {
				EndpointID string `json:"endpoint_id"`
			}
		}
		if json.Unmarshal(body, &created) == nil && created.Endpoint.EndpointID != "" {
			endpointID = created.Endpoint.EndpointID
		}
	}
}

// documentedCall is a call of TestOpenAPIMatchesAnswers.
type documentedCall struct {
	name      string
	token     string
	procedure string
	body      string
	get       bool // GET with the message in the query, instead of POST
	status    int  // 0: 200
	// A request the description does not allow (no token, a field it does
	// not name): ledgerd's refusal is still one it describes.
	outside bool
}

// documentedCalls are calls of every unary procedure, successes and
// refusals, in order: each builds on the ones before.
func documentedCalls(service, admin string) []documentedCall {
	const ledgerSvc, adminSvc, webhookSvc = "/pointledger.v1.LedgerService/", "/pointledger.v1.AdminService/", "/pointledger.v1.WebhookService/"
	inAMonth := time.Now().Add(30 * 24 * time.Hour).UTC().Format(time.RFC3339)
	return []documentedCall{
		{name: "grant", token: service, procedure: ledgerSvc + "Grant",
			body: `{"user_id":"alice","amount":"100","request_id":"grant-1","order_id":"welcome-bonus","metadata":{"campaign":"spring"}}`},
		{name: "grant with expiry", token: service, procedure: ledgerSvc + "Grant",
			body: `{"user_id":"alice","amount":"50","request_id":"grant-2","expire_time":"` + inAMonth + `"}`},
		{name: "purchase", token: service, procedure: ledgerSvc + "Purchase",
			body: `{"user_id":"alice","amount":"30.5","request_id":"purchase-1","order_id":"order-42"}`},
		{name: "purchase replayed", token: service, procedure: ledgerSvc + "Purchase",
			body: `{"user_id":"alice","amount":"30.5","request_id":"purchase-1","order_id":"order-42"}`},
		{name: "refund", token: service, procedure: ledgerSvc + "Refund",
			body: `{"user_id":"alice","amount":"10","request_id":"refund-1","purchase_request_id":"purchase-1"}`},
		{name: "authorize", token: service, procedure: ledgerSvc + "Authorize",
			body: `{"user_id":"alice","amount":"20","request_id":"hold-1","order_id":"order-43","ttl":"900s"}`},
		{name: "capture", token: service, procedure: ledgerSvc + "Capture",
			body: `{"user_id":"alice","hold_request_id":"hold-1","amount":"15","request_id":"capture-1"}`},
		{name: "authorize another", token: service, procedure: ledgerSvc + "Authorize",
			body: `{"user_id":"alice","amount":"5","request_id":"hold-2"}`},
		{name: "void", token: service, procedure: ledgerSvc + "Void",
			body: `{"user_id":"alice","hold_request_id":"hold-2","request_id":"void-1"}`},
		{name: "balance", token: service, procedure: ledgerSvc + "GetBalance", body: `{"user_id":"alice"}`, get: true},
		{name: "balance by POST", token: service, procedure: ledgerSvc + "GetBalance", body: `{"user_id":"alice"}`},
		{name: "entries", token: service, procedure: ledgerSvc + "ListEntries", body: `{"user_id":"alice","page_size":3}`, get: true},
		{name: "history", token: service, procedure: ledgerSvc + "ListHistory",
			body: `{"user_id":"alice","types":["ENTRY_TYPE_PURCHASE","ENTRY_TYPE_CAPTURE"],"start_time":"2000-01-01T00:00:00Z"}`},
		{name: "holds", token: service, procedure: ledgerSvc + "ListHolds",
			body: `{"user_id":"alice","states":["HOLD_STATE_CAPTURED","HOLD_STATE_VOIDED"]}`, get: true},
		{name: "adjust", token: admin, procedure: adminSvc + "Adjust",
			body: `{"user_id":"alice","amount":"1","request_id":"adjust-1","reason":"goodwill"}`},
		{name: "freeze", token: admin, procedure: adminSvc + "SetAccountStatus",
			body: `{"user_id":"alice","status":"ACCOUNT_STATUS_FROZEN","reason":"review"}`},
		{name: "projection status", token: admin, procedure: adminSvc + "GetProjectionStatus", body: `{"user_id":"alice"}`, get: true},
		{name: "rebuild", token: admin, procedure: adminSvc + "RebuildProjection", body: `{"user_id":"alice"}`},
		// An address, so that nothing asks DNS; nothing is sent to it.
		{name: "create endpoint", token: admin, procedure: webhookSvc + "CreateWebhookEndpoint",
			body: `{"url":"https://198.51.100.7/hook","event_types":["points.granted","points.spent"],"description":"crm"}`},
		{name: "endpoints", token: admin, procedure: webhookSvc + "ListWebhookEndpoints", body: `{"page_size":10}`, get: true},
		{name: "update endpoint", token: admin, procedure: webhookSvc + "UpdateWebhookEndpoint",
			body: `{"endpoint_id":"ENDPOINT_ID","event_types":["*"],"disabled":true,"description":null}`},
		{name: "rotate secret", token: admin, procedure: webhookSvc + "RotateWebhookSecret", body: `{"endpoint_id":"ENDPOINT_ID"}`},
		{name: "deliveries, no dispatcher", token: admin, procedure: webhookSvc + "ListWebhookDeliveries",
			body: `{"endpoint_id":"ENDPOINT_ID","states":["DELIVERY_STATE_FAILED"]}`, get: true, status: http.StatusNotImplemented},
		{name: "redeliver, no dispatcher", token: admin, procedure: webhookSvc + "RedeliverWebhookEvents",
			body: `{"endpoint_id":"ENDPOINT_ID","user_id":"alice","from_version":"2"}`, status: http.StatusNotImplemented},
		{name: "endpoint refused", token: admin, procedure: webhookSvc + "CreateWebhookEndpoint",
			body: `{"url":"https://169.254.169.254/","event_types":["*"]}`, status: http.StatusBadRequest},
		{name: "delete endpoint", token: admin, procedure: webhookSvc + "DeleteWebhookEndpoint", body: `{"endpoint_id":"ENDPOINT_ID"}`},
		{name: "endpoint not found", token: admin, procedure: webhookSvc + "RotateWebhookSecret", body: `{"endpoint_id":"ENDPOINT_ID"}`,
			status: http.StatusNotFound},
		{name: "refused", token: service, procedure: ledgerSvc + "Purchase",
			body: `{"user_id":"alice","amount":"500","request_id":"purchase-2"}`, status: http.StatusBadRequest},
		{name: "not found", token: service, procedure: ledgerSvc + "Refund",
			body: `{"user_id":"alice","amount":"1","request_id":"refund-2","purchase_request_id":"nothing"}`, status: http.StatusNotFound},
		{name: "denied", token: service, procedure: adminSvc + "GetProjectionStatus", body: `{}`, get: true, status: http.StatusForbidden},
		{name: "unknown field", token: service, procedure: ledgerSvc + "GetBalance",
			body: `{"user_id":"alice","user":"bob"}`, status: http.StatusBadRequest, outside: true},
		{name: "unauthenticated", procedure: ledgerSvc + "GetBalance", body: `{"user_id":"alice"}`, status: http.StatusUnauthorized, outside: true},
	}
}

// checkRequired checks that the description requires exactly the fields of
// md that ledgerd always sends: the answer body without one of them does
// not validate, without any other (a message, as an entry or a timestamp,
// that this answer happens to have) it does.
func checkRequired(tb testing.TB, v validator.Validator, name string, md protoreflect.MessageDescriptor, req *http.Request, res *http.Response, body []byte) {
	tb.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	for _, field := range slices.Sorted(maps.Keys(fields)) {
		fd := md.Fields().ByName(protoreflect.Name(field))
		if fd == nil {
			tb.Errorf("%s: answered %s, no field of %s", name, field, md.FullName())
			continue
		}
		without := maps.Clone(fields)
		delete(without, field)
		b, err := json.Marshal(without)
		if err != nil {
			tb.Fatal(err)
		}
		res.Body = io.NopCloser(bytes.NewReader(b))
		if ok, _ := v.ValidateHttpResponse(req, res); ok != fd.HasPresence() {
			tb.Errorf("%s: the answer without %s validates: %t, want %t", name, field, ok, fd.HasPresence())
		}
	}
}

// describe lists validation errors with the schema failures under them.
func describe(errs []*validationerrors.ValidationError) string {
	var b strings.Builder
	for _, e := range errs {
		fmt.Fprintf(&b, "  %s: %s\n", e.Message, e.Reason)
		for _, f := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "    %s: %s\n", f.FieldPath, f.Reason)
		}
	}
	return b.String()
}
