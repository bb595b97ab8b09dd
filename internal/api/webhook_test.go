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
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dispatch/memory"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/servetest"
	"github.com/pointledger/pointledger/internal/webhook"
)

// The webhook service's tests keep their endpoints in the dispatcher's
// memory store (dispatch/memory), which passes the same contract as the
// DynamoDB store ledgerd uses (dispatch/dispatchtest): the API's tests need
// neither the emulator nor the SDK.

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
	store    *memory.Store
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
	store := memory.New(now)
	r := &resolver{table: hostTable()}
	o.URLPolicy.Resolver = r
	logs := &syncBuffer{}
	srv := servetest.New(tb, servetest.Options{
		Webhooks:   store,
		Deliveries: deliveries,
		Webhook:    o,
		Log:        slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	return &webhookServer{srv: srv, client: srv.Webhook, store: store, resolver: r, log: logs}
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

// table is everything the endpoint store holds, each as text, sorted:
// what a refused call must leave as it was.
func (w *webhookServer) table(tb testing.TB) []string {
	tb.Helper()
	return w.store.Items()
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
	stored, err := w.store.Get(ctx, e.EndpointId)
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

// ListWebhookEndpoints pages oldest first, by the endpoints' ids (ULIDs,
// in creation order even within one instant), each page of the size asked
// (a token holds the id of the last endpoint it returned).
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
		{1, [][]string{{a}, {b}, {c}, {d}, {e}}}, // a and b share an instant, and go one by one
		{2, [][]string{{a, b}, {c, d}, {e}}},
		{3, [][]string{{a, b, c}, {d, e}}}, // c and d share an instant, on two pages
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
	// Pending points, partly taken back while pending: a REVERSAL.
	must(s.client.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "4", RequestId: "g3",
		EffectiveDelay: durationpb.New(30 * time.Minute)})))
	must(s.client.ReverseGrant(ctx, connect.NewRequest(&pb.ReverseGrantRequest{UserId: "alice", GrantRequestId: "g3", Amount: "1",
		RequestId: "rv1", Reason: "returned"})))
	// The first grant's points expire and the pending ones mature: an
	// EXPIRATION and a MATURATION before the next grant.
	clk.Add(2 * time.Hour)
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
