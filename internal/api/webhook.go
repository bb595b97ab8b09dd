package api

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/oklog/ulid/v2"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
	"github.com/pointledger/pointledger/internal/webhook"
)

// WebhookEndpoints is what the webhook service needs of the endpoint
// store (dispatch/dynamo.Endpoints is one). The store checks nothing about a URL
// or event types: the service does, before it calls.
type WebhookEndpoints interface {
	Create(ctx context.Context, e dispatch.Endpoint) (dispatch.Endpoint, webhook.Secret, error)
	Get(ctx context.Context, id string) (dispatch.Endpoint, error)
	Page(ctx context.Context, after string, size int) ([]dispatch.Endpoint, string, error)
	Update(ctx context.Context, id string, change func(*dispatch.Endpoint) error) (dispatch.Endpoint, error)
	Rotate(ctx context.Context, id string) (webhook.Secret, error)
	Delete(ctx context.Context, id string) error
}

// WebhookDeliveries is what the webhook service needs of the dispatcher:
// an endpoint's deliveries, paged, and sending events again.
type WebhookDeliveries interface {
	ListDeliveries(ctx context.Context, q dispatch.DeliveryQuery) ([]dispatch.Delivery, string, error)
	Redeliver(ctx context.Context, r dispatch.Redelivery) (int64, error)
}

// DefaultEndpointRefresh is how often, at most, a dispatcher reads the
// endpoints again, by default: the dispatcher's own default, not a copy.
// A dispatcher's setting and the service's EndpointRefresh must be the same
// for the service's wait to hold.
const DefaultEndpointRefresh = dispatch.DefaultEndpointRefresh

// MaxDescriptionBytes bounds an endpoint's description.
const MaxDescriptionBytes = 512

// WebhookOptions are the settings of the webhook service.
type WebhookOptions struct {
	// URLPolicy judges endpoint URLs (its zero value: https only, public
	// addresses only).
	URLPolicy webhook.URLPolicy
	// EndpointRefresh is how often, at most, the dispatchers read the
	// endpoints again: a change that stops deliveries (a delete, a
	// disable, a new URL or event types) answers only after that long and
	// a quarter more, so that no delivery starts under the old settings
	// once it has answered. 0: DefaultEndpointRefresh.
	EndpointRefresh time.Duration
	// PageTokens makes and checks ListWebhookEndpoints' page tokens.
	PageTokens *pagetoken.Codec
}

// WebhookService implements pointledger.v1.WebhookService.
type WebhookService struct {
	endpoints  WebhookEndpoints
	deliveries WebhookDeliveries // nil: no dispatcher wired; its RPCs answer unimplemented
	o          WebhookOptions
	log        *slog.Logger
}

var _ pointledgerv1connect.WebhookServiceHandler = (*WebhookService)(nil)

// NewWebhookService serves the endpoints of e and the deliveries of d (nil:
// ListWebhookDeliveries and RedeliverWebhookEvents answer unimplemented).
func NewWebhookService(e WebhookEndpoints, d WebhookDeliveries, o WebhookOptions, log *slog.Logger) *WebhookService {
	if o.EndpointRefresh <= 0 {
		o.EndpointRefresh = DefaultEndpointRefresh
	}
	return &WebhookService{endpoints: e, deliveries: d, o: o, log: log}
}

func (s *WebhookService) CreateWebhookEndpoint(ctx context.Context, req *connect.Request[pb.CreateWebhookEndpointRequest]) (*connect.Response[pb.CreateWebhookEndpointResponse], error) {
	r := req.Msg
	sub, err := s.checkEndpoint(ctx, r.Url, r.EventTypes, r.Description)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	e, secret, err := s.endpoints.Create(ctx, dispatch.Endpoint{URL: r.Url, EventTypes: sub.Names(), Subscription: sub, Description: r.Description})
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	s.log.InfoContext(ctx, "webhook endpoint created", "endpoint_id", e.ID, "event_types", e.EventTypes)
	return connect.NewResponse(&pb.CreateWebhookEndpointResponse{Endpoint: endpointToProto(e), Secret: secret.Text()}), nil
}

// checkEndpoint checks what a new endpoint is made of; an empty url or
// no event types are refused like any other bad value.
func (s *WebhookService) checkEndpoint(ctx context.Context, url string, eventTypes []string, description string) (ledger.Subscription, error) {
	if err := checkDescription(description); err != nil {
		return ledger.Subscription{}, err
	}
	sub, err := ledger.ParseSubscription(eventTypes)
	if err != nil {
		return ledger.Subscription{}, err
	}
	if s.endpoints == nil {
		return ledger.Subscription{}, errNoEndpointStore()
	}
	// Last: it may ask DNS.
	return sub, s.o.URLPolicy.Check(ctx, url)
}

// endpointsRead names ListWebhookEndpoints' tokens (their scope).
const endpointsRead = "ListWebhookEndpoints"

// ListWebhookEndpoints pages the endpoints oldest first (by id: ULIDs),
// as the store pages them (WebhookEndpoints.Page); a token holds the id
// of the last endpoint it returned, and the next page starts after it.
func (s *WebhookService) ListWebhookEndpoints(ctx context.Context, req *connect.Request[pb.ListWebhookEndpointsRequest]) (*connect.Response[pb.ListWebhookEndpointsResponse], error) {
	size, err := ledger.PageSize(int(req.Msg.PageSize))
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	after := ""
	if token := req.Msg.PageToken; token != "" {
		if after, err = s.o.PageTokens.DecodeKey(token, endpointsRead); err != nil {
			return nil, s.toConnect(ctx, err)
		}
	}
	if s.endpoints == nil {
		return nil, s.toConnect(ctx, errNoEndpointStore())
	}
	page, next, err := s.endpoints.Page(ctx, after, size)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	out := &pb.ListWebhookEndpointsResponse{Endpoints: make([]*pb.WebhookEndpoint, len(page))}
	for i, e := range page {
		out.Endpoints[i] = endpointToProto(e)
	}
	if next != "" {
		out.NextPageToken = s.o.PageTokens.EncodeKey(next, endpointsRead)
	}
	return connect.NewResponse(out), nil
}

func (s *WebhookService) UpdateWebhookEndpoint(ctx context.Context, req *connect.Request[pb.UpdateWebhookEndpointRequest]) (*connect.Response[pb.UpdateWebhookEndpointResponse], error) {
	r := req.Msg
	change, err := s.checkUpdate(ctx, r)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	if change == nil { // nothing to change: nothing written
		e, err := s.endpoints.Get(ctx, r.EndpointId)
		if err != nil {
			return nil, s.toConnect(ctx, err)
		}
		return connect.NewResponse(&pb.UpdateWebhookEndpointResponse{Endpoint: endpointToProto(e)}), nil
	}
	var stops bool // the change may stop deliveries the old settings would make
	e, err := s.endpoints.Update(ctx, r.EndpointId, func(e *dispatch.Endpoint) error {
		before := *e
		change(e)
		stops = e.URL != before.URL || !slices.Equal(e.EventTypes, before.EventTypes) || (e.Disabled && !before.Disabled)
		return nil
	})
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	s.log.InfoContext(ctx, "webhook endpoint updated", "endpoint_id", e.ID, "event_types", e.EventTypes, "disabled", e.Disabled)
	if stops {
		if err := s.awaitDispatchers(ctx); err != nil {
			return nil, s.toConnect(ctx, err)
		}
	}
	return connect.NewResponse(&pb.UpdateWebhookEndpointResponse{Endpoint: endpointToProto(e)}), nil
}

// checkUpdate checks an update and returns the change it makes to an
// endpoint, or nil if it sets nothing.
func (s *WebhookService) checkUpdate(ctx context.Context, r *pb.UpdateWebhookEndpointRequest) (func(*dispatch.Endpoint), error) {
	if err := checkEndpointID(r.EndpointId); err != nil {
		return nil, err
	}
	if r.Description != nil {
		if err := checkDescription(*r.Description); err != nil {
			return nil, err
		}
	}
	var sub ledger.Subscription
	if len(r.EventTypes) > 0 {
		var err error
		if sub, err = ledger.ParseSubscription(r.EventTypes); err != nil {
			return nil, err
		}
	}
	if s.endpoints == nil {
		return nil, errNoEndpointStore()
	}
	if r.Url != nil {
		if err := s.o.URLPolicy.Check(ctx, *r.Url); err != nil {
			return nil, err
		}
	}
	if r.Url == nil && len(r.EventTypes) == 0 && r.Disabled == nil && r.Description == nil {
		return nil, nil
	}
	return func(e *dispatch.Endpoint) {
		if r.Url != nil {
			e.URL = *r.Url
		}
		if len(r.EventTypes) > 0 {
			e.EventTypes, e.Subscription = sub.Names(), sub
		}
		if r.Description != nil {
			e.Description = *r.Description
		}
		switch {
		case r.Disabled == nil:
		case *r.Disabled && !e.Disabled:
			e.Disabled, e.DisabledReason = true, "disabled by an admin"
		case !*r.Disabled:
			e.Disabled, e.DisabledReason = false, ""
		}
	}, nil
}

func (s *WebhookService) DeleteWebhookEndpoint(ctx context.Context, req *connect.Request[pb.DeleteWebhookEndpointRequest]) (*connect.Response[pb.DeleteWebhookEndpointResponse], error) {
	id := req.Msg.EndpointId
	if err := s.checkStore(id); err != nil {
		return nil, s.toConnect(ctx, err)
	}
	if err := s.endpoints.Delete(ctx, id); err != nil {
		return nil, s.toConnect(ctx, err)
	}
	s.log.InfoContext(ctx, "webhook endpoint deleted", "endpoint_id", id)
	if err := s.awaitDispatchers(ctx); err != nil {
		return nil, s.toConnect(ctx, err)
	}
	return connect.NewResponse(&pb.DeleteWebhookEndpointResponse{}), nil
}

func (s *WebhookService) RotateWebhookSecret(ctx context.Context, req *connect.Request[pb.RotateWebhookSecretRequest]) (*connect.Response[pb.RotateWebhookSecretResponse], error) {
	id := req.Msg.EndpointId
	if err := s.checkStore(id); err != nil {
		return nil, s.toConnect(ctx, err)
	}
	secret, err := s.endpoints.Rotate(ctx, id)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	// No wait: the old secret keeps signing beside the new one.
	s.log.InfoContext(ctx, "webhook secret rotated", "endpoint_id", id)
	return connect.NewResponse(&pb.RotateWebhookSecretResponse{Secret: secret.Text()}), nil
}

// awaitDispatchers returns once every dispatcher has read the endpoints
// since the change just written: EndpointRefresh after it, and a quarter
// more for a read that had started before the write and ends after it.
func (s *WebhookService) awaitDispatchers(ctx context.Context) error {
	timer := time.NewTimer(s.o.EndpointRefresh + s.o.EndpointRefresh/4)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

func (s *WebhookService) ListWebhookDeliveries(ctx context.Context, req *connect.Request[pb.ListWebhookDeliveriesRequest]) (*connect.Response[pb.ListWebhookDeliveriesResponse], error) {
	r := req.Msg
	q, err := deliveryQuery(r)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	if err := s.deliveriesFor(ctx, r.EndpointId); err != nil {
		return nil, s.toConnect(ctx, err)
	}
	deliveries, next, err := s.deliveries.ListDeliveries(ctx, q)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	out := &pb.ListWebhookDeliveriesResponse{NextPageToken: next, Deliveries: make([]*pb.WebhookDelivery, len(deliveries))}
	for i, d := range deliveries {
		out.Deliveries[i] = deliveryToProto(d)
	}
	return connect.NewResponse(out), nil
}

func (s *WebhookService) RedeliverWebhookEvents(ctx context.Context, req *connect.Request[pb.RedeliverWebhookEventsRequest]) (*connect.Response[pb.RedeliverWebhookEventsResponse], error) {
	r := req.Msg
	rd, err := redelivery(r)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	if err := s.deliveriesFor(ctx, r.EndpointId); err != nil {
		return nil, s.toConnect(ctx, err)
	}
	n, err := s.deliveries.Redeliver(ctx, rd)
	if err != nil {
		return nil, s.toConnect(ctx, err)
	}
	s.log.InfoContext(ctx, "webhook events redelivered", "endpoint_id", rd.EndpointID, "user_id", rd.UserID, "from_version", rd.FromVersion,
		"start_time", rd.StartTime, "count", n)
	return connect.NewResponse(&pb.RedeliverWebhookEventsResponse{Count: n}), nil
}

// deliveryQuery checks a ListWebhookDeliveries request and returns its
// query, its page size resolved (ledger.PageSize).
func deliveryQuery(r *pb.ListWebhookDeliveriesRequest) (dispatch.DeliveryQuery, error) {
	q := dispatch.DeliveryQuery{EndpointID: r.EndpointId, UserID: r.UserId, Page: ledger.Page{PageToken: r.PageToken}}
	if err := checkEndpointAndUser(r.EndpointId, r.UserId); err != nil {
		return q, err
	}
	var err error
	if q.PageSize, err = ledger.PageSize(int(r.PageSize)); err != nil {
		return q, err
	}
	for _, st := range r.States {
		ds, ok := deliveryStateFromProto(st)
		if !ok {
			return q, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "states: %v is not a delivery state", st)
		}
		if !slices.Contains(q.States, ds) {
			q.States = append(q.States, ds)
		}
	}
	return q, nil
}

// redelivery checks a RedeliverWebhookEvents request and returns what it
// asks for.
func redelivery(r *pb.RedeliverWebhookEventsRequest) (dispatch.Redelivery, error) {
	rd := dispatch.Redelivery{EndpointID: r.EndpointId, UserID: r.UserId, FromVersion: r.FromVersion}
	if err := checkEndpointAndUser(r.EndpointId, r.UserId); err != nil {
		return rd, err
	}
	switch {
	case r.FromVersion < 0:
		return rd, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "from_version %d: want a version (1, 2, ...) or 0", r.FromVersion)
	case r.FromVersion > 0 && r.StartTime != nil:
		return rd, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "from_version and start_time: give one or neither, not both")
	case r.StartTime != nil:
		if err := r.StartTime.CheckValid(); err != nil {
			return rd, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidFilter, "start_time: %v", err)
		}
		rd.StartTime = r.StartTime.AsTime()
	}
	return rd, nil
}

func checkEndpointAndUser(endpointID, user string) error {
	if err := checkEndpointID(endpointID); err != nil {
		return err
	}
	if user != "" {
		return ledger.ValidateUserID(user)
	}
	return nil
}

// deliveriesFor checks that the server can answer a deliveries' call (a
// dispatcher and an endpoint store are wired) and that the endpoint
// exists: ENDPOINT_NOT_FOUND, rather than an empty list, for one that
// does not.
func (s *WebhookService) deliveriesFor(ctx context.Context, endpointID string) error {
	if s.deliveries == nil {
		return errNoDispatcher()
	}
	if s.endpoints == nil {
		return errNoEndpointStore()
	}
	_, err := s.endpoints.Get(ctx, endpointID)
	return err
}

// checkStore checks an endpoint id, and that the server has endpoints.
func (s *WebhookService) checkStore(id string) error {
	if err := checkEndpointID(id); err != nil {
		return err
	}
	if s.endpoints == nil {
		return errNoEndpointStore()
	}
	return nil
}

// ReasonNotConfigured: the server is built without the part a method
// needs (a test server without an endpoint store, a server without a
// dispatcher); unimplemented.
const ReasonNotConfigured = "NOT_CONFIGURED"

// errNoDispatcher answers the deliveries' calls on a server built without
// a dispatcher.
func errNoDispatcher() error {
	return withReason(connect.NewError(connect.CodeUnimplemented,
		errors.New("this server keeps no webhook deliveries: no dispatcher is wired to it")), ReasonNotConfigured)
}

// errNoEndpointStore answers on a server built without an endpoint
// store: a test server of the API alone (servetest without the emulator).
func errNoEndpointStore() error {
	return withReason(connect.NewError(connect.CodeUnimplemented,
		errors.New("this server keeps no webhook endpoints")), ReasonNotConfigured)
}

// toConnect is the package's toConnect, but for the Connect errors above,
// which are answers already.
func (s *WebhookService) toConnect(ctx context.Context, err error) error {
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce
	}
	return toConnect(ctx, s.log, err)
}

// checkEndpointID refuses what is not an endpoint id as the store gives
// them (a ULID, 26 characters), before the store is asked.
func checkEndpointID(id string) error {
	if _, err := ulid.ParseStrict(id); err != nil {
		return ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidEndpointID,
			"endpoint_id %q is not an endpoint id: 26 letters and digits, as CreateWebhookEndpoint answers", clipped(id))
	}
	return nil
}

// checkDescription bounds a description (protobuf's decoding has made
// sure it is UTF-8).
func checkDescription(d string) error {
	if len(d) > MaxDescriptionBytes {
		return ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidDescription,
			"description: at most %d bytes, not %d", MaxDescriptionBytes, len(d))
	}
	return nil
}

// clipped keeps a value quoted in a message short, whatever the caller sent.
func clipped(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}

func endpointToProto(e dispatch.Endpoint) *pb.WebhookEndpoint {
	return &pb.WebhookEndpoint{
		EndpointId:     e.ID,
		Url:            e.URL,
		EventTypes:     e.EventTypes,
		Description:    e.Description,
		Disabled:       e.Disabled,
		DisabledReason: e.DisabledReason,
		CreateTime:     timestamppb.New(e.CreateTime),
	}
}

func deliveryToProto(d dispatch.Delivery) *pb.WebhookDelivery {
	return &pb.WebhookDelivery{
		EventId:         d.EventID,
		Type:            string(d.Type),
		UserId:          d.UserID,
		Version:         d.Version,
		State:           deliveryStates[d.State],
		Attempts:        int32(d.Attempts),
		LastStatusCode:  int32(d.LastStatusCode),
		LastError:       d.LastError,
		NextAttemptTime: timeToProto(d.NextAttemptTime),
		AttemptLog:      attemptsToProto(d.Log),
	}
}

func attemptsToProto(log []dispatch.Attempt) []*pb.WebhookAttempt {
	if len(log) == 0 {
		return nil
	}
	out := make([]*pb.WebhookAttempt, len(log))
	for i, a := range log {
		out[i] = &pb.WebhookAttempt{
			AttemptTime: timestamppb.New(a.Time),
			StatusCode:  int32(a.Status),
			Error:       a.Error,
			Duration:    durationpb.New(a.Duration),
		}
	}
	return out
}

var deliveryStates = map[dispatch.DeliveryState]pb.DeliveryState{
	dispatch.DeliveryPending:   pb.DeliveryState_DELIVERY_STATE_PENDING,
	dispatch.DeliverySucceeded: pb.DeliveryState_DELIVERY_STATE_SUCCEEDED,
	dispatch.DeliveryFailed:    pb.DeliveryState_DELIVERY_STATE_FAILED,
}

func deliveryStateFromProto(p pb.DeliveryState) (dispatch.DeliveryState, bool) {
	for s, q := range deliveryStates {
		if q == p {
			return s, true
		}
	}
	return "", false
}
