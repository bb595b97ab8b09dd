package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	ledgermemory "github.com/pointledger/pointledger/internal/ledger/memory"
	"github.com/pointledger/pointledger/internal/webhook"
)

// ListWebhookDeliveries answers a delivery's attempt log through Connect,
// from a dispatcher on the memory stores: an event answered 500 and then
// 204 lists both attempts, oldest first, each with its time, status,
// error and duration.
func TestWebhookAttemptLogThroughConnect(t *testing.T) {
	t.Parallel()
	var requests atomic.Int32
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if requests.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rcv.Close)

	led := ledgermemory.New(nil)
	var disp atomic.Pointer[dispatch.Dispatcher]
	w := newWebhookServer(t, api.WebhookOptions{}, nil, lateDeliveries{&disp})
	ctx := context.Background()
	ep, _, err := w.store.Create(ctx, dispatch.Endpoint{URL: rcv.URL + "/hook", EventTypes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(w.store, led, dispatch.Options{
		Sender:       webhook.NewSender(webhook.Options{Policy: webhook.URLPolicy{AllowHTTP: true, AllowLoopback: true}, Timeout: 10 * time.Second}),
		EncodeEntry:  api.EntryJSON,
		Schedule:     webhook.Schedule{Delays: []time.Duration{time.Millisecond, time.Millisecond}},
		PollInterval: 20 * time.Millisecond, EndpointRefresh: 50 * time.Millisecond,
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	disp.Store(d)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: "alice", RequestID: "g1", Amount: "5"}, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := led.Apply(ctx, m); err != nil {
		t.Fatal(err)
	}
	entries, err := led.EntriesAfter(ctx, "alice", 0, 10)
	if err != nil || len(entries) != 1 {
		t.Fatalf("entries %v, %v", entries, err)
	}
	if err := d.Apply(ctx, entries); err != nil {
		t.Fatal(err)
	}

	var got *pb.WebhookDelivery
	deadline := time.Now().Add(2 * time.Minute)
	for got == nil || got.State != pb.DeliveryState_DELIVERY_STATE_SUCCEEDED {
		if time.Now().After(deadline) {
			t.Fatalf("waited 2m for the delivery to succeed: %v", got)
		}
		time.Sleep(20 * time.Millisecond)
		res, err := w.client.ListWebhookDeliveries(ctx, connect.NewRequest(&pb.ListWebhookDeliveriesRequest{EndpointId: ep.ID, UserId: "alice"}))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Msg.Deliveries) == 1 {
			got = res.Msg.Deliveries[0]
		}
	}
	if got.Attempts != 2 || got.LastStatusCode != 204 || len(got.AttemptLog) != 2 {
		t.Fatalf("delivery %v: want 2 attempts logged, the last 204", got)
	}
	failed, ok := got.AttemptLog[0], got.AttemptLog[1]
	if failed.StatusCode != 500 || failed.Error == "" || ok.StatusCode != 204 || ok.Error != "" {
		t.Errorf("log %v: want a 500 with its error, then a 204 without", got.AttemptLog)
	}
	for _, a := range got.AttemptLog {
		if a.AttemptTime == nil || a.AttemptTime.AsTime().IsZero() || a.Duration == nil || a.Duration.AsDuration() < 0 {
			t.Errorf("attempt %v: want a time and a duration", a)
		}
	}
	if failed.AttemptTime.AsTime().After(ok.AttemptTime.AsTime()) {
		t.Errorf("log %v: want the oldest attempt first", got.AttemptLog)
	}
}

// lateDeliveries answers through the dispatcher once it is made (the
// dispatcher needs the server's store, made with the server).
type lateDeliveries struct {
	d *atomic.Pointer[dispatch.Dispatcher]
}

func (l lateDeliveries) ListDeliveries(ctx context.Context, q dispatch.DeliveryQuery) ([]dispatch.Delivery, string, error) {
	return l.d.Load().ListDeliveries(ctx, q)
}

func (l lateDeliveries) Redeliver(ctx context.Context, r dispatch.Redelivery) (int64, error) {
	return l.d.Load().Redeliver(ctx, r)
}
