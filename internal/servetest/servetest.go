// Package servetest serves ledgerd's API for tests: its handlers with its
// handler options, as cmd/ledgerd wires them, over the in-memory store,
// history and leases of package memory, reconciled by package reconcile
// as ledgerd's are, budgets included, optionally behind its
// authentication. The tests of packages api and auth build their servers
// here, so neither needs DynamoDB Local; the DynamoDB store passes the same
// contract as the memory one (ledgertest.Contract), on the emulator. The
// webhook service's endpoints are kept by DynamoDB alone: a test that
// needs them gives a store on the emulator (Options.Webhooks).
package servetest

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/memory"
	"github.com/pointledger/pointledger/internal/pagetoken"
	"github.com/pointledger/pointledger/internal/reconcile"
)

var (
	_ api.AdminLedger   = (*memory.Store)(nil)
	_ api.History       = (*memory.History)(nil)
	_ api.AdminHistory  = (*memory.History)(nil)
	_ reconcile.Store   = (*memory.Store)(nil)
	_ reconcile.History = (*memory.History)(nil)
	_ reconcile.Leases  = (*memory.Leases)(nil)
)

// Options say how a server is built; the zero value is ledgerd's defaults
// without authentication.
type Options struct {
	// Now is the clock of the store and of the expiry policy; nil: time.Now.
	Now func() time.Time
	// Expiry is the program's expiry policy (its Now is set from Now).
	Expiry api.ExpiryPolicy
	// Auth, if not nil, authenticates every call as `ledgerd serve` does:
	// its middleware, rate limited by Limiter (nil: none), before the
	// handlers, and its interceptor in them.
	Auth    *auth.Authenticator
	Limiter *auth.Limiter
	// Support bounds a support token's adjustments (with Auth); nil: a
	// support token may adjust nothing.
	Support *auth.SupportLimits
	// MaxHolds bounds each account's open holds; 0: the default.
	MaxHolds int
	// HistoryWait is how long ListHistory waits for a min_version; 0: the
	// default (api.DefaultHistoryWait).
	HistoryWait time.Duration
	// Interceptors go after auth's, where `ledgerd serve` puts affinity's
	// forwarder.
	Interceptors []connect.Interceptor
	// Routes are more handlers on the API's port, by pattern (a peer
	// health endpoint).
	Routes map[string]http.Handler
	// Webhooks is the webhook service's endpoint store, Deliveries its
	// dispatcher; nil: the service answers unimplemented (NOT_CONFIGURED)
	// once a request passes its checks. The only endpoint store is
	// DynamoDB's (dispatch/dynamo.Endpoints): a test that needs one makes it on
	// the emulator and passes it here.
	Webhooks   api.WebhookEndpoints
	Deliveries api.WebhookDeliveries
	// Webhook is the webhook service's URL policy and endpoint refresh
	// (its page tokens are set here); a zero EndpointRefresh is 1 ms, so
	// that a change that waits for the dispatchers waits little.
	Webhook api.WebhookOptions
	// Log, if not nil, gets the handlers' log (request logging included),
	// at every level; nil: discarded.
	Log *slog.Logger
}

// Server is ledgerd's API served over HTTP/1.1 and h2c on a fresh memory
// store.
type Server struct {
	URL  string
	HTTP *http.Client // HTTP/1.1, many connections at once (raw requests, storms)
	H2C  *http.Client // HTTP/2 without TLS (gRPC)
	// Clients over HTTP, without credentials.
	Ledger  pointledgerv1connect.LedgerServiceClient
	Admin   pointledgerv1connect.AdminServiceClient
	Webhook pointledgerv1connect.WebhookServiceClient
	Budgets pointledgerv1connect.BudgetServiceClient
	Kinds   pointledgerv1connect.PointKindServiceClient

	Store   *memory.Store
	History *memory.History // follows Store (History.Pause: as a projector that lags)
	// Handler is what the server serves, for what calls it in-process
	// (the console).
	Handler http.Handler

	srv *httptest.Server
}

// Close stops serving, as a crashed instance would; the test's end does
// it too.
func (s *Server) Close() { s.srv.Close() }

// New serves ledgerd's API on a fresh store, until the test ends.
func New(tb testing.TB, o Options) *Server {
	tb.Helper()
	s, stop := Start(o)
	tb.Cleanup(stop)
	return s
}

// Start serves ledgerd's API on a fresh store until stop is called, for
// what runs outside a test (a TestMain serving runnable examples).
func Start(o Options) (s *Server, stop func()) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	store := memory.New(o.Now)
	store.SetLimits(0, o.MaxHolds)
	hist := memory.NewHistory(store)
	o.Expiry.Now = o.Now

	options := api.HandlerOptions(log)
	protect := func(h http.Handler) http.Handler { return h }
	if o.Auth != nil {
		interceptor := auth.Interceptor()
		if o.Support != nil {
			interceptor = auth.NewInterceptor(*o.Support)
		}
		options = append(options, connect.WithInterceptors(interceptor))
		protect = func(h http.Handler) http.Handler { return auth.Middleware(o.Auth, o.Limiter, log, h, options...) }
	}
	options = append(options, connect.WithInterceptors(o.Interceptors...))
	mux := http.NewServeMux()
	for pattern, h := range o.Routes {
		mux.Handle(pattern, h)
	}
	service := api.NewLedgerService(store, hist, ledger.DefaultScale, log)
	service.SetExpiryPolicy(o.Expiry)
	service.SetKinds(store)
	if o.HistoryWait > 0 {
		service.SetHistoryWait(o.HistoryWait)
	}
	path, handler := pointledgerv1connect.NewLedgerServiceHandler(service, options...)
	mux.Handle(path, api.KnownProcedures(api.LedgerServiceDescriptor(), protect(handler), options...))
	noProjector := func() (history.ProjectorStatus, bool) { return history.ProjectorStatus{}, false }
	rec := reconcile.New(store, hist, memory.NewLeases(o.Now))
	rec.SetClock(o.Now)
	admin := api.NewAdminService(store, hist, rec, noProjector, ledger.DefaultScale, log)
	admin.SetExpiryPolicy(o.Expiry)
	path, handler = pointledgerv1connect.NewAdminServiceHandler(admin, options...)
	mux.Handle(path, api.KnownProcedures(api.AdminServiceDescriptor(), protect(handler), options...))
	o.Webhook.PageTokens = pagetoken.Derived("servetest")
	if o.Webhook.EndpointRefresh == 0 {
		o.Webhook.EndpointRefresh = time.Millisecond
	}
	webhooks := api.NewWebhookService(o.Webhooks, o.Deliveries, o.Webhook, log)
	path, handler = pointledgerv1connect.NewWebhookServiceHandler(webhooks, options...)
	mux.Handle(path, api.KnownProcedures(api.WebhookServiceDescriptor(), protect(handler), options...))
	path, handler = pointledgerv1connect.NewBudgetServiceHandler(api.NewBudgetService(store, ledger.DefaultScale, log), options...)
	mux.Handle(path, api.KnownProcedures(api.BudgetServiceDescriptor(), protect(handler), options...))
	path, handler = pointledgerv1connect.NewPointKindServiceHandler(api.NewPointKindService(store, log), options...)
	mux.Handle(path, api.KnownProcedures(api.PointKindServiceDescriptor(), protect(handler), options...))
	mux.Handle("/", api.NoService(options...))

	var served http.Handler = mux
	srv := httptest.NewUnstartedServer(served)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true) // h2c: gRPC without TLS, as ledgerd serves it
	srv.Start()
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &h2, DialContext: (&net.Dialer{}).DialContext}}
	stop = func() {
		srv.Close()
		httpClient.CloseIdleConnections()
		h2c.CloseIdleConnections()
	}
	return &Server{
		URL:     srv.URL,
		HTTP:    httpClient,
		H2C:     h2c,
		Ledger:  pointledgerv1connect.NewLedgerServiceClient(httpClient, srv.URL),
		Admin:   pointledgerv1connect.NewAdminServiceClient(httpClient, srv.URL),
		Webhook: pointledgerv1connect.NewWebhookServiceClient(httpClient, srv.URL),
		Budgets: pointledgerv1connect.NewBudgetServiceClient(httpClient, srv.URL),
		Kinds:   pointledgerv1connect.NewPointKindServiceClient(httpClient, srv.URL),
		Store:   store,
		History: hist,
		Handler: served,
		srv:     srv,
	}, stop
}

// ErrorInfo is err's Connect code and its google.rpc.ErrorInfo detail, the
// reason a client branches on (nil when it has none; CodeUnknown and nil
// for an error that is not a Connect error).
func ErrorInfo(err error) (connect.Code, *errdetails.ErrorInfo) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return connect.CodeUnknown, nil
	}
	for _, d := range ce.Details() {
		if m, err := d.Value(); err == nil {
			if info, ok := m.(*errdetails.ErrorInfo); ok {
				return ce.Code(), info
			}
		}
	}
	return ce.Code(), nil
}

// Snapshot is every record of the store and of the history, to compare
// before and after a call.
func (s *Server) Snapshot() memory.Snapshot {
	out := s.Store.Snapshot()
	for k, v := range s.History.Snapshot() {
		out[k] = v
	}
	return out
}
