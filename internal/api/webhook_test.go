package api_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/servetest"
	"github.com/pointledger/pointledger/internal/webhook"
)

// The webhook service's tests keep their endpoints where ledgerd does, in
// the webhooks table on DynamoDB Local (dispatch.Endpoints): the only
// endpoint store there is. The emulator starts on the first test that asks
// for it; the API's other tests run on the memory store without it.
func TestMain(m *testing.M) { dynamotest.Main(m) }

// resolver answers host names from a table and records every name it is
// asked; a name outside the table is refused. No DNS server is asked, and
// nothing here opens a connection: URLPolicy.Check only resolves.
type resolver struct {
	mu    sync.Mutex
	table map[string][]netip.Addr
	asked []string
}

func (r *resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, host)
	if addrs, ok := r.table[host]; ok {
		return addrs, nil
	}
	return nil, fmt.Errorf("%s is not in the test's table", host)
}

func (r *resolver) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked)
}

// hostTable: public names resolve to documentation addresses (TEST-NET,
// never dialed), the others to what an attacker would aim at.
func hostTable() map[string][]netip.Addr {
	addrs := func(s ...string) []netip.Addr {
		out := make([]netip.Addr, len(s))
		for i, a := range s {
			out[i] = netip.MustParseAddr(a)
		}
		return out
	}
	return map[string][]netip.Addr{
		"crm.example":       addrs("198.51.100.7"),
		"mailer.example":    addrs("203.0.113.9", "2001:db8::9"),
		"internal.example":  addrs("10.0.0.1"),
		"metadata.example":  addrs("169.254.169.254"),
		"localhost.example": addrs("::1"),
		"mixed.example":     addrs("198.51.100.8", "127.0.0.1"),
	}
}

// webhookServer is ledgerd's API with its webhook service on a webhooks
// table of its own, its log kept.
type webhookServer struct {
	srv      *servetest.Server
	client   pointledgerv1connect.WebhookServiceClient
	env      *dynamotest.Env
	resolver *resolver
	log      *syncBuffer
}

// syncBuffer is a log's output, written by concurrent handlers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// newWebhookServer serves the API with o's webhook options, their resolver
// the test's table, and endpoints created at now (nil: time.Now).
func newWebhookServer(tb testing.TB, o api.WebhookOptions, now func() time.Time, deliveries api.WebhookDeliveries) *webhookServer {
	tb.Helper()
	env := dynamotest.New(tb)
	r := &resolver{table: hostTable()}
	o.URLPolicy.Resolver = r
	logs := &syncBuffer{}
	srv := servetest.New(tb, servetest.Options{
		Webhooks:   dispatch.NewEndpoints(env.Client, env.Webhooks, now),
		Deliveries: deliveries,
		Webhook:    o,
		Log:        slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	return &webhookServer{srv: srv, client: srv.Webhook, env: env, resolver: r, log: logs}
}

func (w *webhookServer) create(tb testing.TB, url string, types ...string) *pb.CreateWebhookEndpointResponse {
	tb.Helper()
	res, err := w.client.CreateWebhookEndpoint(context.Background(), connect.NewRequest(&pb.CreateWebhookEndpointRequest{
		Url: url, EventTypes: types, Description: "crm",
	}))
	if err != nil {
		tb.Fatalf("create %s: %v", url, err)
	}
	return res.Msg
}

func (w *webhookServer) list(tb testing.TB) []*pb.WebhookEndpoint {
	tb.Helper()
	res, err := w.client.ListWebhookEndpoints(context.Background(), connect.NewRequest(&pb.ListWebhookEndpointsRequest{}))
	if err != nil {
		tb.Fatal(err)
	}
	return res.Msg.Endpoints
}

// table is every item of the webhooks table, each as text, sorted: what
// a refused call must leave as it was.
func (w *webhookServer) table(tb testing.TB) []string {
	tb.Helper()
	out, err := w.env.Client.Scan(context.Background(), &dynamodb.ScanInput{TableName: &w.env.Webhooks, ConsistentRead: aws.Bool(true)})
	if err != nil {
		tb.Fatal(err)
	}
	items := make([]string, len(out.Items))
	for i, item := range out.Items {
		items[i] = render(&types.AttributeValueMemberM{Value: item})
	}
	slices.Sort(items)
	return items
}

func render(v types.AttributeValue) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return fmt.Sprintf("%q", v.Value)
	case *types.AttributeValueMemberN:
		return v.Value
	case *types.AttributeValueMemberBOOL:
		return fmt.Sprint(v.Value)
	case *types.AttributeValueMemberL:
		parts := make([]string, len(v.Value))
		for i, e := range v.Value {
			parts[i] = render(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case *types.AttributeValueMemberM:
		parts := make([]string, 0, len(v.Value))
		for k, e := range v.Value {
			parts = append(parts, k+":"+render(e))
		}
		slices.Sort(parts)
		return "{" + strings.Join(parts, " ") + "}"
	}
	return fmt.Sprintf("%T", v)
}

// Create, list, update, rotate and delete over Connect: each answer says
// what the table then holds, and the secret is shown by create and rotate
// only, never listed, never in an update's answer, never logged.
func TestWebhookEndpointRoundTrip(t *testing.T) {
	t.Parallel()
	w := newWebhookServer(t, api.WebhookOptions{}, nil, nil)
	ctx := context.Background()
	made := w.create(t, "https://crm.example/hook", "points.granted", "points.spent")
	e := made.Endpoint
	secret, err := webhook.ParseSecret(made.Secret)
	if err != nil || e.EndpointId == "" || e.CreateTime == nil || e.Disabled {
		t.Fatalf("created %v with secret %q (%v): want an id, a time, enabled, and a whsec_ secret", e, made.Secret, err)
	}
	if got := w.list(t); len(got) != 1 || got[0].Url != e.Url || !slices.Equal(got[0].EventTypes, e.EventTypes) || got[0].Description != "crm" {
		t.Errorf("listed %v, want the endpoint created", got)
	}

	// Only what is set changes.
	res, err := w.client.UpdateWebhookEndpoint(ctx, connect.NewRequest(&pb.UpdateWebhookEndpointRequest{EndpointId: e.EndpointId, Description: new("the CRM")}))
	if err != nil || res.Msg.Endpoint.Description != "the CRM" || res.Msg.Endpoint.Url != e.Url || !slices.Equal(res.Msg.Endpoint.EventTypes, e.EventTypes) {
		t.Fatalf("update of the description: %v, %v", res, err)
	}
	res, err = w.client.UpdateWebhookEndpoint(ctx, connect.NewRequest(&pb.UpdateWebhookEndpointRequest{
		EndpointId: e.EndpointId, Url: new("https://mailer.example/events"), EventTypes: []string{"*"}, Disabled: new(true),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if u := res.Msg.Endpoint; u.Url != "https://mailer.example/events" || !slices.Equal(u.EventTypes, []string{"*"}) || !u.Disabled ||
		u.DisabledReason == "" || u.Description != "the CRM" || !u.CreateTime.AsTime().Equal(e.CreateTime.AsTime()) {
		t.Errorf("updated to %v", u)
	}
	res, err = w.client.UpdateWebhookEndpoint(ctx, connect.NewRequest(&pb.UpdateWebhookEndpointRequest{EndpointId: e.EndpointId, Disabled: new(false)}))
	if err != nil || res.Msg.Endpoint.Disabled || res.Msg.Endpoint.DisabledReason != "" {
		t.Errorf("enabled again: %v, %v; want enabled, without a reason", res, err)
	}
	if got := w.list(t); len(got) != 1 || got[0].Url != "https://mailer.example/events" || got[0].Disabled {
		t.Errorf("listed after the updates: %v", got)
	}

	rotated, err := w.client.RotateWebhookSecret(ctx, connect.NewRequest(&pb.RotateWebhookSecretRequest{EndpointId: e.EndpointId}))
	if err != nil {
		t.Fatal(err)
	}
	if next, err := webhook.ParseSecret(rotated.Msg.Secret); err != nil || next.Text() == secret.Text() {
		t.Errorf("rotated to %q (%v): want a new secret", rotated.Msg.Secret, err)
	}
	stored, err := dispatch.NewEndpoints(w.env.Client, w.env.Webhooks, nil).Get(ctx, e.EndpointId)
	if err != nil || len(stored.Secrets) != 2 || stored.Secrets[0].Secret.Text() != rotated.Msg.Secret || stored.Secrets[1].Secret.Text() != made.Secret {
		t.Errorf("stored secrets after the rotation: %v, %v; want the new one, then the old one", stored.Secrets, err)
	}

	// The answers that are not Create's or Rotate's, as JSON: no secret.
	listed := string(postRaw(t, w.srv, pointledgerv1connect.WebhookServiceListWebhookEndpointsProcedure, `{}`))
	updated := string(postRaw(t, w.srv, pointledgerv1connect.WebhookServiceUpdateWebhookEndpointProcedure, `{"endpoint_id":"`+e.EndpointId+`"}`))
	for what, text := range map[string]string{"ListWebhookEndpoints": listed, "UpdateWebhookEndpoint": updated, "the log": w.log.String()} {
		for _, s := range []string{made.Secret, rotated.Msg.Secret, "whsec_"} {
			if strings.Contains(text, s) {
				t.Errorf("%s shows a secret (%s):\n%s", what, s, text)
			}
		}
	}
	if !strings.Contains(w.log.String(), "CreateWebhookEndpoint") {
		t.Errorf("the log has no line of the calls, so its lack of secrets proves nothing:\n%s", w.log.String())
	}

	if _, err := w.client.DeleteWebhookEndpoint(ctx, connect.NewRequest(&pb.DeleteWebhookEndpointRequest{EndpointId: e.EndpointId})); err != nil {
		t.Fatal(err)
	}
	if got := w.list(t); len(got) != 0 {
		t.Errorf("listed after the delete: %v", got)
	}
	_, err = w.client.RotateWebhookSecret(ctx, connect.NewRequest(&pb.RotateWebhookSecretRequest{EndpointId: e.EndpointId}))
	if code, why := reason(err); code != connect.CodeNotFound || why != ledger.ReasonEndpointNotFound {
		t.Errorf("rotate a deleted endpoint: %v, want not_found %s", err, ledger.ReasonEndpointNotFound)
	}
}

// postRaw posts body to procedure as Connect JSON and returns the answer.
func postRaw(tb testing.TB, srv *servetest.Server, procedure, body string) []byte {
	tb.Helper()
	s := &testServer{srv: srv, url: srv.URL, http: srv.HTTP}
	return s.postJSONBytes(tb, procedure, body)
}

// Every bad request is refused with its code and reason, and leaves the
// webhooks table as it was, item for item.
func TestBadWebhookRequestsWriteNothing(t *testing.T) {
	t.Parallel()
	w := newWebhookServer(t, api.WebhookOptions{}, nil, nil)
	ctx := context.Background()
	id := w.create(t, "https://crm.example/hook", "*").Endpoint.EndpointId
	const unknown = "01KAXQ4V0SR0Z7Y2M3N4P5Q6R7" // well formed, no endpoint's
	before := w.table(t)

	create := func(url string, types []string, description string) error {
		_, err := w.client.CreateWebhookEndpoint(ctx, connect.NewRequest(&pb.CreateWebhookEndpointRequest{Url: url, EventTypes: types, Description: description}))
		return err
	}
	update := func(r *pb.UpdateWebhookEndpointRequest) error {
		_, err := w.client.UpdateWebhookEndpoint(ctx, connect.NewRequest(r))
		return err
	}
	deliveries := func(r *pb.ListWebhookDeliveriesRequest) error {
		_, err := w.client.ListWebhookDeliveries(ctx, connect.NewRequest(r))
		return err
	}
	redeliver := func(r *pb.RedeliverWebhookEventsRequest) error {
		_, err := w.client.RedeliverWebhookEvents(ctx, connect.NewRequest(r))
		return err
	}
	all := []string{"*"}
	invalid, notFound := connect.CodeInvalidArgument, connect.CodeNotFound
	cases := []struct {
		name   string
		call   func() error
		code   connect.Code
		reason string
	}{
		{"no url", func() error { return create("", all, "") }, invalid, ledger.ReasonEndpointURLNotAllowed},
		{"ftp", func() error { return create("ftp://crm.example/hook", all, "") }, invalid, ledger.ReasonEndpointURLNotAllowed},
		{"plain http", func() error { return create("http://crm.example/hook", all, "") }, invalid, ledger.ReasonEndpointURLNotAllowed},
		{"a password in the url", func() error { return create("https://u:p@crm.example/hook", all, "") }, invalid, ledger.ReasonEndpointURLNotAllowed},
		{"a name that does not resolve", func() error { return create("https://nowhere.example/hook", all, "") }, invalid, ledger.ReasonEndpointURLNotAllowed},
		{"no event types", func() error { return create("https://crm.example/hook", nil, "") }, invalid, ledger.ReasonInvalidEventType},
		{"an unknown event type", func() error { return create("https://crm.example/hook", []string{"points.stolen"}, "") }, invalid, ledger.ReasonInvalidEventType},
		{"* among others", func() error { return create("https://crm.example/hook", []string{"*", "points.spent"}, "") }, invalid, ledger.ReasonInvalidEventType},
		{"a type twice", func() error { return create("https://crm.example/hook", []string{"points.spent", "points.spent"}, "") }, invalid, ledger.ReasonInvalidEventType},
		{"a long description", func() error { return create("https://crm.example/hook", all, strings.Repeat("d", 513)) }, invalid, ledger.ReasonInvalidDescription},
		{"update: no id", func() error { return update(&pb.UpdateWebhookEndpointRequest{Disabled: new(true)}) }, invalid, ledger.ReasonInvalidEndpointID},
		{"update: an id not an id", func() error { return update(&pb.UpdateWebhookEndpointRequest{EndpointId: "../ENDPOINTS", Disabled: new(true)}) }, invalid, ledger.ReasonInvalidEndpointID},
		{"update: unknown", func() error { return update(&pb.UpdateWebhookEndpointRequest{EndpointId: unknown, Disabled: new(true)}) }, notFound, ledger.ReasonEndpointNotFound},
		{"update: a private url", func() error { return update(&pb.UpdateWebhookEndpointRequest{EndpointId: id, Url: new("https://10.0.0.1/")}) }, invalid, ledger.ReasonEndpointURLNotAllowed},
		{"update: an empty url", func() error { return update(&pb.UpdateWebhookEndpointRequest{EndpointId: id, Url: new("")}) }, invalid, ledger.ReasonEndpointURLNotAllowed},
		{"update: an unknown type", func() error { return update(&pb.UpdateWebhookEndpointRequest{EndpointId: id, EventTypes: []string{"nope"}}) }, invalid, ledger.ReasonInvalidEventType},
		{"update: a long description", func() error {
			return update(&pb.UpdateWebhookEndpointRequest{EndpointId: id, Description: new(strings.Repeat("d", 513)), Disabled: new(true)})
		}, invalid, ledger.ReasonInvalidDescription},
		{"delete: an id not an id", func() error {
			_, err := w.client.DeleteWebhookEndpoint(ctx, connect.NewRequest(&pb.DeleteWebhookEndpointRequest{EndpointId: "x"}))
			return err
		}, invalid, ledger.ReasonInvalidEndpointID},
		{"delete: unknown", func() error {
			_, err := w.client.DeleteWebhookEndpoint(ctx, connect.NewRequest(&pb.DeleteWebhookEndpointRequest{EndpointId: unknown}))
			return err
		}, notFound, ledger.ReasonEndpointNotFound},
		{"rotate: unknown", func() error {
			_, err := w.client.RotateWebhookSecret(ctx, connect.NewRequest(&pb.RotateWebhookSecretRequest{EndpointId: unknown}))
			return err
		}, notFound, ledger.ReasonEndpointNotFound},
		{"list: a negative page size", func() error {
			_, err := w.client.ListWebhookEndpoints(ctx, connect.NewRequest(&pb.ListWebhookEndpointsRequest{PageSize: -1}))
			return err
		}, invalid, ledger.ReasonInvalidPageSize},
		{"list: a token not given", func() error {
			_, err := w.client.ListWebhookEndpoints(ctx, connect.NewRequest(&pb.ListWebhookEndpointsRequest{PageToken: "v1.AAAA"}))
			return err
		}, invalid, ledger.ReasonInvalidPageToken},
		{"deliveries: an id not an id", func() error { return deliveries(&pb.ListWebhookDeliveriesRequest{EndpointId: "x"}) }, invalid, ledger.ReasonInvalidEndpointID},
		{"deliveries: a bad user", func() error { return deliveries(&pb.ListWebhookDeliveriesRequest{EndpointId: id, UserId: "a b"}) }, invalid, ledger.ReasonInvalidUserID},
		{"deliveries: an unspecified state", func() error {
			return deliveries(&pb.ListWebhookDeliveriesRequest{EndpointId: id, States: []pb.DeliveryState{pb.DeliveryState_DELIVERY_STATE_UNSPECIFIED}})
		}, invalid, ledger.ReasonInvalidFilter},
		{"deliveries: a negative page size", func() error { return deliveries(&pb.ListWebhookDeliveriesRequest{EndpointId: id, PageSize: -5}) }, invalid, ledger.ReasonInvalidPageSize},
		{"redeliver: an id not an id", func() error { return redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: ""}) }, invalid, ledger.ReasonInvalidEndpointID},
		{"redeliver: a negative version", func() error { return redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: id, FromVersion: -1}) }, invalid, ledger.ReasonInvalidFilter},
		{"redeliver: a version and a time", func() error {
			return redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: id, UserId: "alice", FromVersion: 3, StartTime: timestamppb.Now()})
		}, invalid, ledger.ReasonInvalidFilter},
		{"redeliver: a bad time", func() error {
			return redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: id, StartTime: &timestamppb.Timestamp{Seconds: -1 << 40}})
		}, invalid, ledger.ReasonInvalidFilter},
		{"redeliver: a bad user", func() error { return redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: id, UserId: strings.Repeat("u", 300)}) }, invalid, ledger.ReasonInvalidUserID},
		// Well formed, but this server has no dispatcher.
		{"deliveries without a dispatcher", func() error { return deliveries(&pb.ListWebhookDeliveriesRequest{EndpointId: id}) }, connect.CodeUnimplemented, api.ReasonNotConfigured},
		{"redeliver without a dispatcher", func() error { return redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: id}) }, connect.CodeUnimplemented, api.ReasonNotConfigured},
	}
	for _, c := range cases {
		err := c.call()
		if code, why := reason(err); code != c.code || why != c.reason {
			t.Errorf("%s: %v (%v, %q), want %v %s", c.name, err, code, why, c.code, c.reason)
		}
	}
	if after := w.table(t); !slices.Equal(after, before) {
		t.Errorf("refused requests changed the webhooks table:\nbefore %v\nafter  %v", before, after)
	}
}

// The SSRF rules at creation (and on a new URL): an endpoint at a private,
// link-local or loopback address, written as one or behind a name that
// resolves to one, is refused ENDPOINT_URL_NOT_ALLOWED. Names resolve
// through the test's table; nothing is dialed.
func TestWebhookURLsThatReachInsideAreRefused(t *testing.T) {
	t.Parallel()
	strict := newWebhookServer(t, api.WebhookOptions{}, nil, nil)
	local := newWebhookServer(t, api.WebhookOptions{URLPolicy: webhook.URLPolicy{AllowHTTP: true, AllowLoopback: true}}, nil, nil)
	ctx := context.Background()
	refused := []struct {
		url      string
		resolves string // the name the resolver must have been asked, if any
	}{
		{"https://10.0.0.1/hook", ""},
		{"https://169.254.169.254/latest/meta-data/", ""},
		{"https://[::1]/hook", ""},
		{"https://127.0.0.1:8443/hook", ""},
		{"https://[::ffff:10.0.0.1]/hook", ""},
		{"https://2130706433/hook", ""}, // 127.0.0.1 in decimal
		{"https://internal.example/hook", "internal.example"},
		{"https://metadata.example/hook", "metadata.example"},
		{"https://localhost.example/hook", "localhost.example"},
		{"https://mixed.example/hook", "mixed.example"}, // one address of two is loopback
	}
	for _, r := range refused {
		_, err := strict.client.CreateWebhookEndpoint(ctx, connect.NewRequest(&pb.CreateWebhookEndpointRequest{Url: r.url, EventTypes: []string{"*"}}))
		if code, why := reason(err); code != connect.CodeInvalidArgument || why != ledger.ReasonEndpointURLNotAllowed {
			t.Errorf("create %s: %v, want invalid_argument %s", r.url, err, ledger.ReasonEndpointURLNotAllowed)
		}
		if r.resolves != "" && !slices.Contains(strict.resolver.names(), r.resolves) {
			t.Errorf("create %s: the resolver was not asked for %s, so the refusal is not the address's", r.url, r.resolves)
		}
	}
	if got := strict.list(t); len(got) != 0 {
		t.Errorf("refused endpoints were stored: %v", got)
	}
	for _, name := range strict.resolver.names() {
		if _, ok := hostTable()[name]; !ok {
			t.Errorf("the resolver was asked for %s, which no URL named", name)
		}
	}
	// Loopback and http where the server allows them (make run), private
	// and link-local still not.
	local.create(t, "http://127.0.0.1:9/hook", "*")
	local.create(t, "http://localhost.example/hook", "*")
	for _, url := range []string{"http://10.0.0.1/hook", "http://169.254.169.254/", "http://internal.example/hook"} {
		_, err := local.client.CreateWebhookEndpoint(ctx, connect.NewRequest(&pb.CreateWebhookEndpointRequest{Url: url, EventTypes: []string{"*"}}))
		if _, why := reason(err); why != ledger.ReasonEndpointURLNotAllowed {
			t.Errorf("create %s where loopback is allowed: %v, want %s", url, err, ledger.ReasonEndpointURLNotAllowed)
		}
	}
}
