package api_test

import (
	"bytes"
	"context"
	"encoding/json"
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
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
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
	id := w.create(t, "https://crm.example/hook", "*").Endpoint.EndpointId
	before := w.table(t)
	for _, c := range badWebhookRequests(w.client, id) {
		err := c.call(context.Background())
		if code, why := reason(err); code != c.code || why != c.reason {
			t.Errorf("%s: %v (%v, %q), want %v %s", c.name, err, code, why, c.code, c.reason)
		}
	}
	if after := w.table(t); !slices.Equal(after, before) {
		t.Errorf("refused requests changed the webhooks table:\nbefore %v\nafter  %v", before, after)
	}
}

// badWebhookRequest is a request the webhook service refuses, with the
// code and reason it refuses it with.
type badWebhookRequest struct {
	name   string
	call   func(context.Context) error
	code   connect.Code
	reason string
}

// badWebhookRequests are refused requests of every method; id is an
// endpoint's.
func badWebhookRequests(w pointledgerv1connect.WebhookServiceClient, id string) []badWebhookRequest {
	const unknown = "01KAXQ4V0SR0Z7Y2M3N4P5Q6R7" // well formed, no endpoint's
	create := func(url string, types []string, description string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := w.CreateWebhookEndpoint(ctx, connect.NewRequest(&pb.CreateWebhookEndpointRequest{Url: url, EventTypes: types, Description: description}))
			return err
		}
	}
	update := func(r *pb.UpdateWebhookEndpointRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := w.UpdateWebhookEndpoint(ctx, connect.NewRequest(r))
			return err
		}
	}
	deliveries := func(r *pb.ListWebhookDeliveriesRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := w.ListWebhookDeliveries(ctx, connect.NewRequest(r))
			return err
		}
	}
	redeliver := func(r *pb.RedeliverWebhookEventsRequest) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := w.RedeliverWebhookEvents(ctx, connect.NewRequest(r))
			return err
		}
	}
	other := func(call func(context.Context) (any, error)) func(context.Context) error {
		return func(ctx context.Context) error { _, err := call(ctx); return err }
	}
	all := []string{"*"}
	invalid, notFound := connect.CodeInvalidArgument, connect.CodeNotFound
	return []badWebhookRequest{
		{"no url", create("", all, ""), invalid, ledger.ReasonEndpointURLNotAllowed},
		{"ftp", create("ftp://crm.example/hook", all, ""), invalid, ledger.ReasonEndpointURLNotAllowed},
		{"plain http", create("http://crm.example/hook", all, ""), invalid, ledger.ReasonEndpointURLNotAllowed},
		{"a password in the url", create("https://u:p@crm.example/hook", all, ""), invalid, ledger.ReasonEndpointURLNotAllowed},
		{"a name that does not resolve", create("https://nowhere.example/hook", all, ""), invalid, ledger.ReasonEndpointURLNotAllowed},
		{"no event types", create("https://crm.example/hook", nil, ""), invalid, ledger.ReasonInvalidEventType},
		{"an unknown event type", create("https://crm.example/hook", []string{"points.stolen"}, ""), invalid, ledger.ReasonInvalidEventType},
		{"* among others", create("https://crm.example/hook", []string{"*", "points.spent"}, ""), invalid, ledger.ReasonInvalidEventType},
		{"a type twice", create("https://crm.example/hook", []string{"points.spent", "points.spent"}, ""), invalid, ledger.ReasonInvalidEventType},
		{"a long description", create("https://crm.example/hook", all, strings.Repeat("d", 513)), invalid, ledger.ReasonInvalidDescription},
		{"update: no id", update(&pb.UpdateWebhookEndpointRequest{Disabled: new(true)}), invalid, ledger.ReasonInvalidEndpointID},
		{"update: an id not an id", update(&pb.UpdateWebhookEndpointRequest{EndpointId: "../ENDPOINTS", Disabled: new(true)}), invalid, ledger.ReasonInvalidEndpointID},
		{"update: unknown", update(&pb.UpdateWebhookEndpointRequest{EndpointId: unknown, Disabled: new(true)}), notFound, ledger.ReasonEndpointNotFound},
		{"update: a private url", update(&pb.UpdateWebhookEndpointRequest{EndpointId: id, Url: new("https://10.0.0.1/")}), invalid, ledger.ReasonEndpointURLNotAllowed},
		{"update: an empty url", update(&pb.UpdateWebhookEndpointRequest{EndpointId: id, Url: new("")}), invalid, ledger.ReasonEndpointURLNotAllowed},
		{"update: an unknown type", update(&pb.UpdateWebhookEndpointRequest{EndpointId: id, EventTypes: []string{"nope"}}), invalid, ledger.ReasonInvalidEventType},
		{"update: a long description", update(&pb.UpdateWebhookEndpointRequest{EndpointId: id, Description: new(strings.Repeat("d", 513)), Disabled: new(true)}),
			invalid, ledger.ReasonInvalidDescription},
		{"delete: an id not an id", other(func(ctx context.Context) (any, error) {
			return w.DeleteWebhookEndpoint(ctx, connect.NewRequest(&pb.DeleteWebhookEndpointRequest{EndpointId: "x"}))
		}), invalid, ledger.ReasonInvalidEndpointID},
		{"delete: unknown", other(func(ctx context.Context) (any, error) {
			return w.DeleteWebhookEndpoint(ctx, connect.NewRequest(&pb.DeleteWebhookEndpointRequest{EndpointId: unknown}))
		}), notFound, ledger.ReasonEndpointNotFound},
		{"rotate: unknown", other(func(ctx context.Context) (any, error) {
			return w.RotateWebhookSecret(ctx, connect.NewRequest(&pb.RotateWebhookSecretRequest{EndpointId: unknown}))
		}), notFound, ledger.ReasonEndpointNotFound},
		{"list: a negative page size", other(func(ctx context.Context) (any, error) {
			return w.ListWebhookEndpoints(ctx, connect.NewRequest(&pb.ListWebhookEndpointsRequest{PageSize: -1}))
		}), invalid, ledger.ReasonInvalidPageSize},
		{"list: a token not given", other(func(ctx context.Context) (any, error) {
			return w.ListWebhookEndpoints(ctx, connect.NewRequest(&pb.ListWebhookEndpointsRequest{PageToken: "v1.AAAA"}))
		}), invalid, ledger.ReasonInvalidPageToken},
		{"deliveries: an id not an id", deliveries(&pb.ListWebhookDeliveriesRequest{EndpointId: "x"}), invalid, ledger.ReasonInvalidEndpointID},
		{"deliveries: a bad user", deliveries(&pb.ListWebhookDeliveriesRequest{EndpointId: id, UserId: "a b"}), invalid, ledger.ReasonInvalidUserID},
		{"deliveries: an unspecified state", deliveries(&pb.ListWebhookDeliveriesRequest{EndpointId: id, States: []pb.DeliveryState{pb.DeliveryState_DELIVERY_STATE_UNSPECIFIED}}),
			invalid, ledger.ReasonInvalidFilter},
		{"deliveries: a negative page size", deliveries(&pb.ListWebhookDeliveriesRequest{EndpointId: id, PageSize: -5}), invalid, ledger.ReasonInvalidPageSize},
		{"redeliver: an id not an id", redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: ""}), invalid, ledger.ReasonInvalidEndpointID},
		{"redeliver: a negative version", redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: id, FromVersion: -1}), invalid, ledger.ReasonInvalidFilter},
		{"redeliver: a version and a time", redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: id, UserId: "alice", FromVersion: 3, StartTime: timestamppb.Now()}),
			invalid, ledger.ReasonInvalidFilter},
		{"redeliver: a bad time", redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: id, StartTime: &timestamppb.Timestamp{Seconds: -1 << 40}}),
			invalid, ledger.ReasonInvalidFilter},
		{"redeliver: a bad user", redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: id, UserId: strings.Repeat("u", 300)}), invalid, ledger.ReasonInvalidUserID},
		// Well formed, but this server has no dispatcher.
		{"deliveries without a dispatcher", deliveries(&pb.ListWebhookDeliveriesRequest{EndpointId: id}), connect.CodeUnimplemented, api.ReasonNotConfigured},
		{"redeliver without a dispatcher", redeliver(&pb.RedeliverWebhookEventsRequest{EndpointId: id}), connect.CodeUnimplemented, api.ReasonNotConfigured},
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

// ListWebhookEndpoints pages oldest first, and a page ends between two
// create times, never between endpoints created at the same instant (a
// token holds the create time of the last endpoint it returned).
func TestListWebhookEndpointsPages(t *testing.T) {
	t.Parallel()
	clk := ledgertest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	w := newWebhookServer(t, api.WebhookOptions{}, clk.Now, nil)
	// A and B at one instant, C and D at the next, E after them.
	var ids []string
	for i, gap := range []time.Duration{0, 0, time.Second, 0, time.Second} {
		clk.Add(gap)
		ids = append(ids, w.create(t, fmt.Sprintf("https://crm.example/hook/%d", i), "*").Endpoint.EndpointId)
	}
	a, b, c, d, e := ids[0], ids[1], ids[2], ids[3], ids[4]
	for _, tc := range []struct {
		size  int32
		pages [][]string
	}{
		{1, [][]string{{a, b}, {c, d}, {e}}}, // a run longer than a page is one page
		{2, [][]string{{a, b}, {c, d}, {e}}},
		{3, [][]string{{a, b}, {c, d, e}}}, // not {a, b, c}: c and d share an instant
		{4, [][]string{{a, b, c, d}, {e}}},
		{0, [][]string{{a, b, c, d, e}}},
	} {
		var got [][]string
		token := ""
		for range 10 {
			res, err := w.client.ListWebhookEndpoints(context.Background(), connect.NewRequest(&pb.ListWebhookEndpointsRequest{PageSize: tc.size, PageToken: token}))
			if err != nil {
				t.Fatalf("page size %d: %v", tc.size, err)
			}
			var page []string
			for _, ep := range res.Msg.Endpoints {
				page = append(page, ep.EndpointId)
			}
			got = append(got, page)
			if token = res.Msg.NextPageToken; token == "" {
				break
			}
		}
		if !slices.EqualFunc(got, tc.pages, slices.Equal) {
			t.Errorf("page size %d: pages %v, want %v", tc.size, got, tc.pages)
		}
	}
}

// A delete, a disable and a new URL or new event types answer only after
// the dispatchers' endpoint refresh (and a quarter more), once the change
// is written; other changes answer at once. With a refresh of an hour, the
// former outlast their caller's deadline, written, and the latter do not.
func TestWebhookChangesThatStopDeliveriesWaitForTheDispatchers(t *testing.T) {
	t.Parallel()
	w := newWebhookServer(t, api.WebhookOptions{EndpointRefresh: time.Hour}, nil, nil)
	id := w.create(t, "https://crm.example/hook", "*").Endpoint.EndpointId
	within := func(d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		t.Cleanup(cancel)
		return ctx
	}
	update := func(ctx context.Context, r *pb.UpdateWebhookEndpointRequest) error {
		r.EndpointId = id
		_, err := w.client.UpdateWebhookEndpoint(ctx, connect.NewRequest(r))
		return err
	}
	// At once (a minute is far beyond any of them, far short of an hour).
	for name, r := range map[string]*pb.UpdateWebhookEndpointRequest{
		"a description":     {Description: new("the CRM")},
		"enabled as it was": {Disabled: new(false)},
		"the same url":      {Url: new("https://crm.example/hook")},
		"the same types":    {EventTypes: []string{"*"}},
	} {
		if err := update(within(time.Minute), r); err != nil {
			t.Errorf("update of %s: %v, want an answer without waiting", name, err)
		}
	}
	if _, err := w.client.RotateWebhookSecret(within(time.Minute), connect.NewRequest(&pb.RotateWebhookSecretRequest{EndpointId: id})); err != nil {
		t.Errorf("rotate: %v, want an answer without waiting (the old secret still signs)", err)
	}
	// Waiting, written first.
	for name, r := range map[string]*pb.UpdateWebhookEndpointRequest{
		"a new url":  {Url: new("https://mailer.example/events")},
		"a new type": {EventTypes: []string{"points.spent"}},
		"disabled":   {Disabled: new(true)},
	} {
		if err := update(within(time.Second), r); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Errorf("update of %s: %v, want it to wait past the deadline", name, err)
		}
	}
	if got := w.list(t); len(got) != 1 || got[0].Url != "https://mailer.example/events" || !slices.Equal(got[0].EventTypes, []string{"points.spent"}) || !got[0].Disabled {
		t.Errorf("after the waiting updates: %v, want them written", got)
	}
	_, err := w.client.DeleteWebhookEndpoint(within(time.Second), connect.NewRequest(&pb.DeleteWebhookEndpointRequest{EndpointId: id}))
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("delete: %v, want it to wait past the deadline", err)
	}
	if got := w.list(t); len(got) != 0 {
		t.Errorf("after the delete: %v, want it written", got)
	}
}

// The wait lasts at least the refresh: a lower bound, which a busy machine
// only lengthens.
func TestWebhookDisableWaitsAtLeastTheRefresh(t *testing.T) {
	t.Parallel()
	const refresh = 200 * time.Millisecond
	w := newWebhookServer(t, api.WebhookOptions{EndpointRefresh: refresh}, nil, nil)
	id := w.create(t, "https://crm.example/hook", "*").Endpoint.EndpointId
	start := time.Now()
	if _, err := w.client.UpdateWebhookEndpoint(context.Background(), connect.NewRequest(&pb.UpdateWebhookEndpointRequest{EndpointId: id, Disabled: new(true)})); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < refresh+refresh/4 {
		t.Errorf("the disable answered after %v, before the refresh and its margin (%v)", took, refresh+refresh/4)
	}
}

// EntryJSON, the entry of an event's body, is byte for byte the entry as
// ListEntries answers it over Connect JSON, for an entry of every type.
func TestEntryJSONIsWhatListEntriesAnswers(t *testing.T) {
	t.Parallel()
	clk := ledgertest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s := newServerWith(t, servetest.Options{Now: clk.Now})
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "100", RequestId: "g1", Ttl: durationpb.New(time.Hour),
		OrderId: "welcome", Metadata: map[string]string{"campaign": "spring"}})))
	must(s.purchase("alice", "p1", "10.5"))
	must(s.refund("alice", "r1", "p1", "5"))
	must(s.admin.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "alice", Amount: "1", RequestId: "a1", Reason: "goodwill"})))
	must(s.client.Authorize(ctx, connect.NewRequest(&pb.AuthorizeRequest{UserId: "alice", Amount: "5", RequestId: "h1"})))
	must(s.client.Capture(ctx, connect.NewRequest(&pb.CaptureRequest{UserId: "alice", HoldRequestId: "h1", Amount: "3", RequestId: "c1"})))
	must(s.client.Authorize(ctx, connect.NewRequest(&pb.AuthorizeRequest{UserId: "alice", Amount: "2", RequestId: "h2"})))
	must(s.client.Void(ctx, connect.NewRequest(&pb.VoidRequest{UserId: "alice", HoldRequestId: "h2", RequestId: "v1"})))
	// A pending grant, part of it reversed while pending; it matures (a
	// MATURATION) before the next grant, with g1's EXPIRATION.
	must(s.client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "4", RequestId: "g3", EffectiveDelay: durationpb.New(time.Minute)})))
	must(s.client.ReverseGrant(ctx, connect.NewRequest(&pb.ReverseGrantRequest{UserId: "alice", GrantRequestId: "g3", Amount: "1", RequestId: "rv1", Reason: "returned"})))
	clk.Add(2 * time.Hour) // the grant's points expire: an EXPIRATION before the next grant
	must(s.client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "1", RequestId: "g2"})))

	var listed struct{ Entries []json.RawMessage }
	if err := json.Unmarshal(s.postJSONBytes(t, pointledgerv1connect.LedgerServiceListEntriesProcedure, `{"user_id":"alice","page_size":100}`), &listed); err != nil {
		t.Fatal(err)
	}
	entries, _, err := s.srv.Store.Entries(ctx, "alice", ledger.EntryQuery{Page: ledger.Page{PageSize: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(listed.Entries) {
		t.Fatalf("the store has %d entries, ListEntries answered %d", len(entries), len(listed.Entries))
	}
	seen := map[ledger.EntryType]bool{}
	for i, e := range entries {
		got, err := api.EntryJSON(e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, listed.Entries[i]) {
			t.Errorf("entry %d (%s):\nEntryJSON   %s\nListEntries %s", e.Version, e.Type, got, listed.Entries[i])
		}
		seen[e.Type] = true
	}
	for typ := range ledger.EntryTypes {
		if !seen[typ] {
			t.Errorf("no %s entry was compared: make one above", typ)
		}
	}
}

// deliveries stands in for the dispatcher, which is not part of this
// package's build: it records what the service asks and answers what it
// is given, so that the test sees the requests become queries and the
// deliveries become messages.
type deliveries struct {
	mu         sync.Mutex
	queries    []webhook.DeliveryQuery
	redelivers []webhook.Redelivery
	answer     []webhook.Delivery
}

func (d *deliveries) ListDeliveries(_ context.Context, q webhook.DeliveryQuery) ([]webhook.Delivery, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queries = append(d.queries, q)
	return d.answer, "next", nil
}

func (d *deliveries) Redeliver(_ context.Context, r webhook.Redelivery) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.redelivers = append(d.redelivers, r)
	return 7, nil
}

// ListWebhookDeliveries and RedeliverWebhookEvents pass the request on as
// the dispatcher reads it (the page size resolved, states named once) and
// answer what it says; an endpoint that does not exist is ENDPOINT_NOT_FOUND
// before the dispatcher is asked.
func TestWebhookDeliveriesReachTheDispatcher(t *testing.T) {
	t.Parallel()
	next := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
	d := &deliveries{answer: []webhook.Delivery{
		{EventID: "01KAXQ4V0SR0Z7Y2M3N4P5Q6R8", Type: ledger.EventPointsSpent, UserID: "alice", Version: 2, State: webhook.DeliveryFailed,
			Attempts: 8, LastStatusCode: 503, LastError: "503 Service Unavailable"},
		{EventID: "01KAXQ4V0SR0Z7Y2M3N4P5Q6R9", Type: ledger.EventPointsGranted, UserID: "alice", Version: 1, State: webhook.DeliveryPending,
			Attempts: 1, NextAttemptTime: next},
	}}
	w := newWebhookServer(t, api.WebhookOptions{}, nil, d)
	ctx := context.Background()
	id := w.create(t, "https://crm.example/hook", "*").Endpoint.EndpointId
	res, err := w.client.ListWebhookDeliveries(ctx, connect.NewRequest(&pb.ListWebhookDeliveriesRequest{
		EndpointId: id, UserId: "alice", PageSize: 9000, PageToken: "t",
		States: []pb.DeliveryState{pb.DeliveryState_DELIVERY_STATE_FAILED, pb.DeliveryState_DELIVERY_STATE_PENDING, pb.DeliveryState_DELIVERY_STATE_FAILED},
	}))
	if err != nil {
		t.Fatal(err)
	}
	wantQuery := webhook.DeliveryQuery{EndpointID: id, UserID: "alice", States: []webhook.DeliveryState{webhook.DeliveryFailed, webhook.DeliveryPending},
		Page: ledger.Page{PageSize: ledger.MaxPageSize, PageToken: "t"}}
	if len(d.queries) != 1 || fmt.Sprint(d.queries[0]) != fmt.Sprint(wantQuery) {
		t.Errorf("the dispatcher was asked %v, want %v", d.queries, wantQuery)
	}
	got := res.Msg
	if got.NextPageToken != "next" || len(got.Deliveries) != 2 {
		t.Fatalf("answered %v", got)
	}
	if f := got.Deliveries[0]; f.State != pb.DeliveryState_DELIVERY_STATE_FAILED || f.Type != "points.spent" || f.Attempts != 8 ||
		f.LastStatusCode != 503 || f.LastError == "" || f.NextAttemptTime != nil || f.Version != 2 {
		t.Errorf("the failed delivery answered as %v", f)
	}
	if p := got.Deliveries[1]; p.State != pb.DeliveryState_DELIVERY_STATE_PENDING || !p.NextAttemptTime.AsTime().Equal(next) {
		t.Errorf("the pending delivery answered as %v", p)
	}

	start := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	for _, r := range []*pb.RedeliverWebhookEventsRequest{
		{EndpointId: id, UserId: "alice", FromVersion: 3},
		{EndpointId: id, StartTime: timestamppb.New(start)},
	} {
		res, err := w.client.RedeliverWebhookEvents(ctx, connect.NewRequest(r))
		if err != nil || res.Msg.Count != 7 {
			t.Errorf("redeliver %v: %v, %v; want the dispatcher's count", r, res, err)
		}
	}
	want := []webhook.Redelivery{{EndpointID: id, UserID: "alice", FromVersion: 3}, {EndpointID: id, StartTime: start}}
	if fmt.Sprint(d.redelivers) != fmt.Sprint(want) {
		t.Errorf("the dispatcher was asked to redeliver %v, want %v", d.redelivers, want)
	}

	const unknown = "01KAXQ4V0SR0Z7Y2M3N4P5Q6R7"
	_, err = w.client.ListWebhookDeliveries(ctx, connect.NewRequest(&pb.ListWebhookDeliveriesRequest{EndpointId: unknown}))
	if code, why := reason(err); code != connect.CodeNotFound || why != ledger.ReasonEndpointNotFound {
		t.Errorf("deliveries of no endpoint: %v, want not_found %s", err, ledger.ReasonEndpointNotFound)
	}
	_, err = w.client.RedeliverWebhookEvents(ctx, connect.NewRequest(&pb.RedeliverWebhookEventsRequest{EndpointId: unknown}))
	if code, why := reason(err); code != connect.CodeNotFound || why != ledger.ReasonEndpointNotFound {
		t.Errorf("redeliver to no endpoint: %v, want not_found %s", err, ledger.ReasonEndpointNotFound)
	}
	if len(d.queries) != 1 || len(d.redelivers) != 2 {
		t.Errorf("the dispatcher was asked about an endpoint that does not exist: %v, %v", d.queries, d.redelivers)
	}
}
