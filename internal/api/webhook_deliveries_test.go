package api_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
)

// deliveries stands in for the dispatcher, which is not part of this
// package's build: it records what the service asks and answers what it
// is given, so that the test sees the requests become queries and the
// deliveries become messages.
type deliveries struct {
	mu         sync.Mutex
	queries    []dispatch.DeliveryQuery
	redelivers []dispatch.Redelivery
	answer     []dispatch.Delivery
}

func (d *deliveries) ListDeliveries(_ context.Context, q dispatch.DeliveryQuery) ([]dispatch.Delivery, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.queries = append(d.queries, q)
	return d.answer, "next", nil
}

func (d *deliveries) Redeliver(_ context.Context, r dispatch.Redelivery) (int64, error) {
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
	d := &deliveries{answer: []dispatch.Delivery{
		{EventID: "01KAXQ4V0SR0Z7Y2M3N4P5Q6R8", Type: ledger.EventPointsSpent, UserID: "alice", Version: 2, State: dispatch.DeliveryFailed,
			Attempts: 8, LastStatusCode: 503, LastError: "503 Service Unavailable"},
		{EventID: "01KAXQ4V0SR0Z7Y2M3N4P5Q6R9", Type: ledger.EventPointsGranted, UserID: "alice", Version: 1, State: dispatch.DeliveryPending,
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
	wantQuery := dispatch.DeliveryQuery{EndpointID: id, UserID: "alice", States: []dispatch.DeliveryState{dispatch.DeliveryFailed, dispatch.DeliveryPending},
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
	want := []dispatch.Redelivery{{EndpointID: id, UserID: "alice", FromVersion: 3}, {EndpointID: id, StartTime: start}}
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
