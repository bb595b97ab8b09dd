package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/metrics"
	"github.com/pointledger/pointledger/internal/projection"
)

// healthHandlers serve, on the API's port and without credentials, what
// load balancers and orchestrators probe; each says up or down, nothing
// else (the cause of a failure goes to the log):
//
//   - GET /healthz: "ok" (200) or "unavailable" (503);
//   - grpc.health.v1.Health/Check: SERVING while DynamoDB answers, for ""
//     and for each of ledgerd's services.
func healthHandlers(mux *http.ServeMux, health pinger, log *slog.Logger) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := health.Ping(ctx); err != nil {
			log.WarnContext(ctx, "health check failed", "error", err)
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	// Open to anyone: bound what they may send.
	mux.Handle(grpchealth.NewHandler(storeHealth{store: health, log: log, timeout: 2 * time.Second}, connect.WithReadMaxBytes(api.MaxRequestBytes)))
}

// opsMux is what the operations listener serves: what operators and their
// tools ask, and what strangers must not see (the Go runtime and the
// process, request counts by procedure, the projector's owner, which names
// the host and the pid, the profiler):
//
//   - GET /metrics: Prometheus metrics (package metrics), if m is not nil;
//   - /debug/pprof/: Go's profiler;
//   - GET /projection/status: the projector in this process, as JSON;
//   - GET /dispatch/status: the webhook dispatcher in this process, as JSON;
//   - with health (serve): grpc.health.v1 as on the API's port, and gRPC
//     server reflection (v1 and v1alpha), so that grpcurl and buf curl can
//     list and describe the services without proto files, and the
//     google.rpc.ErrorInfo every error carries (registered by genproto's
//     errdetails, which package api imports).
//
// None of them asks for credentials: the listener must stay private
// (loopback by default).
func opsMux(m *metrics.Metrics, health pinger, projector *projection.Projector, dispatcher *dispatch.Dispatcher, log *slog.Logger) *http.ServeMux {
	mux := http.NewServeMux()
	if m != nil {
		if projector != nil {
			m.WatchProjector(projector.Status)
		}
		mux.Handle("GET /metrics", m.Handler())
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("GET /projection/status", projectionStatus(projector))
	mux.Handle("GET /dispatch/status", dispatchStatus(dispatcher))
	if health == nil {
		return mux
	}
	healthHandlers(mux, health, log)
	if _, err := healthFiles(); err != nil {
		log.Warn("reflection will not describe grpc.health.v1.Health", "error", err)
	}
	// The API's services are described here and called on the API's port:
	// their descriptors are public (proto/), but the list of what a process
	// serves is for its operators.
	reflector := grpcreflect.NewReflector(grpcreflect.NamerFunc(func() []string {
		return []string{pointledgerv1connect.LedgerServiceName, pointledgerv1connect.AdminServiceName, pointledgerv1connect.WebhookServiceName, pointledgerv1connect.BudgetServiceName,
			pointledgerv1connect.PointKindServiceName,
			grpchealth.HealthV1ServiceName}
	}), grpcreflect.WithDescriptorResolver(withHealth{}))
	limit := connect.WithReadMaxBytes(api.MaxRequestBytes)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, limit))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, limit))
	return mux
}

// dispatchStatus serves the webhook dispatcher's status as JSON, beside
// the projector's: its owner, the endpoints, the entries the stream handed
// it, the attempts, deliveries and failures, and the last lag.
func dispatchStatus(d *dispatch.Dispatcher) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if d == nil {
			fmt.Fprintln(w, `{"running":false}`)
			return
		}
		_ = json.NewEncoder(w).Encode(struct {
			Running bool `json:"running"`
			dispatch.Status
		}{true, d.Status()})
	})
}

// projectionStatus serves the projector's status as JSON: its owner, its
// shards, how many entries it applied, and its lag.
func projectionStatus(p *projection.Projector) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if p == nil {
			fmt.Fprintln(w, `{"running":false}`)
			return
		}
		_ = json.NewEncoder(w).Encode(struct {
			Running bool `json:"running"`
			history.ProjectorStatus
		}{true, p.Status()})
	})
}

// opsFlag registers -ops-listen. Each command has its own default, so that
// serve and a projector on one host do not take the same port.
func opsFlag(s *settings, addr *string, def string) {
	s.String(addr, "ops-listen", "LEDGER_OPS_LISTEN", def,
		"the operations listener: /metrics, /debug/pprof/, /projection/status (and with serve gRPC reflection) "+
			"on this address, without credentials, so never a public one; port 0: any free port (logged); "+
			`"" or off: none`)
}

// listenOps binds the operations listener's address ("" or "off": none,
// nil), so that a busy port stops the command before it serves anything.
func listenOps(addr string) (net.Listener, error) {
	if addr == "" || addr == "off" { // off: an empty variable reads as unset
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("operations listener (-ops-listen, LEDGER_OPS_LISTEN): %w", err)
	}
	return ln, nil
}

// serveOps serves h on ln (nil: nothing) until stop.
func serveOps(ln net.Listener, h http.Handler, log *slog.Logger) (stop func()) {
	if ln == nil {
		return func() {}
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC reflection without TLS, as on the API's port
	srv := &http.Server{
		Handler:           h,
		Protocols:         &protocols,
		ReadHeaderTimeout: 5 * time.Second,
		// No WriteTimeout: the profiler writes for as long as it is asked to
		// (pprof refuses a profile longer than the WriteTimeout).
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Error("operations listener", "error", err)
		}
	}()
	bound := ln.Addr().String()
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		log.Info("operations listener: metrics, profiler, projection status", "ops_listen", bound)
	} else {
		log.Warn("operations listener not on loopback: keep its port private, it needs no credentials", "ops_listen", bound)
	}
	return func() { _ = srv.Close() }
}

// handlerOptions are the options of ledgerd's API handlers: the metrics'
// interceptor first, so that it sees the code of every answer, then the
// API's own.
func handlerOptions(m *metrics.Metrics, log *slog.Logger) []connect.HandlerOption {
	return append([]connect.HandlerOption{connect.WithInterceptors(m.Interceptor())}, api.HandlerOptions(log)...)
}

type pinger interface {
	Ping(ctx context.Context) error
}

// cachedPing answers Ping from the last answer for ttl: the health checks
// need no token, and each would otherwise be a DynamoDB read anyone could
// multiply. Callers that come while a ping is out wait for its answer.
type cachedPing struct {
	store pinger
	ttl   time.Duration

	mu  sync.Mutex
	at  time.Time
	err error
}

func (c *cachedPing) Ping(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.ttl {
		return c.err
	}
	err := c.store.Ping(ctx)
	if ctx.Err() != nil {
		return err // this caller's deadline, not an answer for the others
	}
	c.err, c.at = err, time.Now()
	return err
}

// storeHealth answers health checks by asking DynamoDB: ledgerd can do
// nothing useful without it, for any of its services.
type storeHealth struct {
	store   pinger
	log     *slog.Logger
	timeout time.Duration
}

func (h storeHealth) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	switch req.Service {
	case "", pointledgerv1connect.LedgerServiceName, pointledgerv1connect.AdminServiceName, pointledgerv1connect.WebhookServiceName:
	default:
		return nil, connect.NewError(connect.CodeNotFound, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	if err := h.store.Ping(ctx); err != nil {
		h.log.WarnContext(ctx, "health check: DynamoDB does not answer", "service", req.Service, "error", err)
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// healthFiles holds grpc/health/v1/health.proto as gRPC clients know it.
// grpchealth serves those very messages, but registers their descriptors
// under a package of its own (connectext.grpc.health.v1), where reflection
// would not find grpc.health.v1.Health, and with enum values renamed for
// buf lint: this is grpchealth's file with gRPC's names (the wire format
// is the same).
var healthFiles = sync.OnceValues(func() (*protoregistry.Files, error) {
	const from, to = "connectext.grpc.health.v1", "grpc.health.v1"
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(from + ".Health")
	if err != nil {
		return nil, fmt.Errorf("grpchealth's descriptors: %w", err)
	}
	f := protodesc.ToFileDescriptorProto(d.ParentFile())
	f.Name, f.Package, f.Options = proto.String("grpc/health/v1/health.proto"), proto.String(to), nil
	rename := func(name string) *string {
		if after, ok := strings.CutPrefix(name, "."+from+"."); ok {
			name = "." + to + "." + after
		}
		return proto.String(name)
	}
	var renameFields func(msgs []*descriptorpb.DescriptorProto)
	renameFields = func(msgs []*descriptorpb.DescriptorProto) {
		for _, m := range msgs {
			for _, fd := range m.Field {
				if fd.TypeName != nil {
					fd.TypeName = rename(fd.GetTypeName())
				}
			}
			for _, e := range m.EnumType {
				for _, v := range e.Value {
					// SERVING_STATUS_SERVING -> SERVING, as in gRPC's file.
					name := strings.TrimPrefix(v.GetName(), "SERVING_STATUS_")
					if name == "UNSPECIFIED" {
						name = "UNKNOWN"
					}
					v.Name = proto.String(name)
				}
			}
			renameFields(m.NestedType)
		}
	}
	renameFields(f.MessageType)
	for _, svc := range f.Service {
		for _, m := range svc.Method {
			m.InputType, m.OutputType = rename(m.GetInputType()), rename(m.GetOutputType())
		}
	}
	fd, err := protodesc.NewFile(f, protoregistry.GlobalFiles)
	if err != nil {
		return nil, fmt.Errorf("rename grpchealth's descriptors: %w", err)
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(fd); err != nil {
		return nil, err
	}
	return files, nil
})

// withHealth resolves descriptors from healthFiles, then from the program's
// registry.
type withHealth struct{}

func (withHealth) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if own, err := healthFiles(); err == nil {
		if f, err := own.FindFileByPath(path); err == nil {
			return f, nil
		}
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

func (withHealth) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if own, err := healthFiles(); err == nil {
		if d, err := own.FindDescriptorByName(name); err == nil {
			return d, nil
		}
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}
