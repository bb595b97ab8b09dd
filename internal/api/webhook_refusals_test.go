package api_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/servetest"
	"github.com/pointledger/pointledger/internal/webhook"
)

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
