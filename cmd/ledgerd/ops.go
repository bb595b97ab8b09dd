package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
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

	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/metrics"
	"github.com/pointledger/pointledger/internal/projection"
)

// opsHandlers serves what operators and their tools ask ledgerd, beside the
// API and on its port:
//
//   - GET /metrics: Prometheus metrics (package metrics);
//   - grpc.health.v1.Health/Check: SERVING while DynamoDB answers, for ""
//     and for each of ledgerd's services;
//   - gRPC server reflection (v1 and v1alpha), so that grpcurl and buf curl
//     need no proto files.
//
// None of them moves or shows points, so none asks for credentials.
func opsHandlers(mux *http.ServeMux, m *metrics.Metrics, store pinger, projector *projection.Projector, log *slog.Logger) {
	if projector != nil {
		m.WatchProjector(projector.Status)
	}
	mux.Handle("GET /metrics", m.Handler())
	if _, err := healthFiles(); err != nil {
		log.Warn("reflection will not describe grpc.health.v1.Health", "error", err)
	}
	// Open to anyone: bound what they may send.
	limit := connect.WithReadMaxBytes(api.MaxRequestBytes)
	mux.Handle(grpchealth.NewHandler(storeHealth{store: store, log: log, timeout: 2 * time.Second}, limit))
	reflector := grpcreflect.NewReflector(grpcreflect.NamerFunc(func() []string {
		return []string{pointledgerv1connect.LedgerServiceName, pointledgerv1connect.AdminServiceName, grpchealth.HealthV1ServiceName}
	}), grpcreflect.WithDescriptorResolver(withHealth{}))
	mux.Handle(grpcreflect.NewHandlerV1(reflector, limit))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, limit))
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
	case "", pointledgerv1connect.LedgerServiceName, pointledgerv1connect.AdminServiceName:
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
