package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/webhook"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/receive"
	"github.com/pointledger/pointledger/loadtest/report"
)

// delivery is how a run's ledgerd delivers webhook events.
type delivery int

const (
	// deliveryOn: each instance runs the dispatcher as ledgerd serve does
	// by default, fed by the projector's reading of the stream (one
	// reading for both), and delivers every event to the load test's
	// receiver.
	deliveryOn delivery = iota
	// deliveryOwnReader: the same, but the dispatcher reads the stream
	// apart from the projector (-shared-stream-reader=false).
	deliveryOwnReader
	// deliveryOff: no dispatcher (-dispatcher=false), no endpoint: the
	// write path and the projector alone, as before issue 24.
	deliveryOff
)

// args are the flags of ledgerd serve for d. The receiver listens on
// 127.0.0.1 over plain HTTP, which ledgerd refuses unless told.
func (d delivery) args() []string {
	switch d {
	case deliveryOn:
		return []string{"-webhook-allow-http", "-webhook-allow-loopback"}
	case deliveryOwnReader:
		return []string{"-webhook-allow-http", "-webhook-allow-loopback", "-shared-stream-reader=false"}
	case deliveryOff:
		return []string{"-dispatcher=false"}
	}
	return nil
}

// suffix names d in a run's name under -compare-webhooks.
func (d delivery) suffix() string {
	switch d {
	case deliveryOn:
		return ""
	case deliveryOwnReader:
		return "-own-reader"
	case deliveryOff:
		return "-no-webhooks"
	}
	return ""
}

// describe is d in a run's description.
func (d delivery) describe() string {
	switch d {
	case deliveryOn:
		return "webhooks delivered to the load test's receiver (one reading of the stream feeding history and the dispatcher, serve's default)"
	case deliveryOwnReader:
		return "webhooks delivered to the load test's receiver (the dispatcher reading the stream apart from the projector)"
	case deliveryOff:
		return "no webhook dispatcher"
	}
	return ""
}

// webhookEndpoint is the run's endpoint at the load test's receiver.
type webhookEndpoint struct {
	receiver *receive.Server
	http     *http.Client
	admin    string // the admin token
	id       string
}

func (w *webhookEndpoint) api(url string) pointledgerv1connect.WebhookServiceClient {
	return pointledgerv1connect.NewWebhookServiceClient(w.http, url, connect.WithInterceptors(client.Bearer(w.admin)))
}

// startWebhooks starts a receiver on 127.0.0.1 and creates an endpoint
// for it, subscribed to every event, through the WebhookService of the
// ledgerd at url (admin: its admin token). The endpoint exists before the
// run's users have an entry, so each user's first event must be version 1.
func startWebhooks(ctx context.Context, c *http.Client, url, admin, name string) (*webhookEndpoint, error) {
	srv, err := receive.Start(receive.Options{FromVersion1: true})
	if err != nil {
		return nil, err
	}
	w := &webhookEndpoint{receiver: srv, http: c, admin: admin}
	res, err := w.api(url).CreateWebhookEndpoint(ctx, connect.NewRequest(&pb.CreateWebhookEndpointRequest{
		Url: srv.URL, EventTypes: []string{"*"}, Description: "loadtest " + name}))
	if err != nil {
		_ = srv.Close(ctx)
		return nil, fmt.Errorf("create the webhook endpoint: %w", err)
	}
	secret, err := webhook.ParseSecret(res.Msg.Secret)
	if err != nil {
		_ = srv.Close(ctx)
		return nil, fmt.Errorf("the webhook endpoint's secret: %w", err)
	}
	srv.Trust(secret)
	w.id = res.Msg.Endpoint.EndpointId
	return w, nil
}

// measure has the receiver's rate and lag span rec's measurement.
func (w *webhookEndpoint) measure(rec *drive.Recorder) {
	rec.OnMeasure(w.receiver.Begin, w.receiver.End)
}

// drain waits, at most max, for the receiver to have an event of each of
// the entries, and returns what it received. Notices are not entries.
func (w *webhookEndpoint) drain(ctx context.Context, entries int64, max time.Duration) report.Webhooks {
	deadline := time.Now().Add(max)
	for {
		res := w.receiver.Result()
		if res.Events-res.Notices >= entries && res.Missing == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return res
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop deletes the endpoint through the ledgerd at url (on a shared
// emulator the next run's ledgerd would otherwise keep delivering to it)
// and stops the receiver.
func (w *webhookEndpoint) stop(ctx context.Context, url string) error {
	_, err := w.api(url).DeleteWebhookEndpoint(ctx, connect.NewRequest(&pb.DeleteWebhookEndpointRequest{EndpointId: w.id}))
	if err != nil {
		err = fmt.Errorf("delete the webhook endpoint: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if cerr := w.receiver.Close(cctx); err == nil {
		err = cerr
	}
	return err
}

// webhookChecked is what a run with webhooks checks of them.
const webhookChecked = "webhooks: every delivery verifies with the endpoint's secret, each user's events arrive in version order from version 1 with no gap, and the receiver gets one event for each entry of the run's users (duplicates allowed: at least once)"

// checkWebhooks adds to inv what the deliveries broke: the receiver's
// violations, and an event count other than the entries'.
func checkWebhooks(inv *report.Invariants, w report.Webhooks, drain time.Duration) {
	inv.Checked = append(inv.Checked, webhookChecked)
	inv.Violations = append(inv.Violations, w.Violations()...)
	if got := w.Events - w.Notices; got != inv.Entries {
		inv.Violations = append(inv.Violations, fmt.Sprintf("webhooks: %d events received for %d entries (waited up to %s after the run)", got, inv.Entries, drain))
	}
}
