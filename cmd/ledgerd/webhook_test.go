package main

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/ledger"
)

func (p *ledgerdProcess) webhookClient(token string) pointledgerv1connect.WebhookServiceClient {
	return pointledgerv1connect.NewWebhookServiceClient(http.DefaultClient, "http://"+p.addr, connect.WithInterceptors(auth.Bearer(token)))
}

// serve serves WebhookService on the webhooks table, to admins: by default
// only https endpoints at public addresses; with -webhook-allow-http and
// -webhook-allow-loopback (make run's), endpoints on this machine too.
// The URLs are addresses, so nothing is resolved, and nothing is dialed.
func TestServeWebhookService(t *testing.T) {
	t.Parallel()
	strict := startLedgerd(t)
	local := strict.another(t)
	local.start(t, "-webhook-allow-http", "-webhook-allow-loopback")
	ctx := context.Background()
	create := func(p *ledgerdProcess, token, url string) (*pb.CreateWebhookEndpointResponse, error) {
		res, err := p.webhookClient(token).CreateWebhookEndpoint(ctx, connect.NewRequest(&pb.CreateWebhookEndpointRequest{Url: url, EventTypes: []string{"*"}}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	admin := strict.creds.AdminToken
	for _, url := range []string{"http://127.0.0.1:9/hook", "https://127.0.0.1:9/hook", "https://10.0.0.1/hook", "https://169.254.169.254/"} {
		if _, err := create(strict, admin, url); !refusedFor(err, connect.CodeInvalidArgument, ledger.ReasonEndpointURLNotAllowed) {
			t.Errorf("create %s by default: %v, want %s", url, err, ledger.ReasonEndpointURLNotAllowed)
		}
	}
	if _, err := create(local, local.creds.ServiceToken, "http://127.0.0.1:9/hook"); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("a service creates an endpoint: %v, want permission_denied", err)
	}
	made, err := create(local, admin, "http://127.0.0.1:9/hook")
	if err != nil {
		t.Fatalf("create on this machine with -webhook-allow-http and -webhook-allow-loopback: %v", err)
	}
	if _, err := create(local, admin, "http://10.0.0.1/hook"); !refusedFor(err, connect.CodeInvalidArgument, ledger.ReasonEndpointURLNotAllowed) {
		t.Errorf("create at a private address where loopback is allowed: %v, want %s", err, ledger.ReasonEndpointURLNotAllowed)
	}
	// Both instances read the one table.
	listed, err := strict.webhookClient(admin).ListWebhookEndpoints(ctx, connect.NewRequest(&pb.ListWebhookEndpointsRequest{}))
	if err != nil || len(listed.Msg.Endpoints) != 1 || listed.Msg.Endpoints[0].EndpointId != made.Endpoint.EndpointId {
		t.Errorf("listed %v, %v; want the endpoint created", listed, err)
	}
	// The other instance's dispatcher answers for the deliveries: none yet.
	deliveries, err := strict.webhookClient(admin).ListWebhookDeliveries(ctx, connect.NewRequest(&pb.ListWebhookDeliveriesRequest{EndpointId: made.Endpoint.EndpointId}))
	if err != nil || len(deliveries.Msg.Deliveries) != 0 {
		t.Errorf("deliveries of an endpoint no entry was written for: %v, %v; want none", deliveries, err)
	}
	if _, err := strict.webhookClient(admin).DeleteWebhookEndpoint(ctx, connect.NewRequest(&pb.DeleteWebhookEndpointRequest{EndpointId: made.Endpoint.EndpointId})); err != nil {
		t.Errorf("delete: %v", err)
	}
}

func refusedFor(err error, code connect.Code, reason string) bool {
	gotCode, gotReason := errorReason(err)
	return gotCode == code && gotReason == reason
}
