package api

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
)

// LedgerServiceDescriptor describes LedgerService as the protos declare it.
func LedgerServiceDescriptor() protoreflect.ServiceDescriptor {
	return pb.File_pointledger_v1_ledger_proto.Services().ByName("LedgerService")
}

// AdminServiceDescriptor describes AdminService as the protos declare it.
func AdminServiceDescriptor() protoreflect.ServiceDescriptor {
	return pb.File_pointledger_v1_admin_proto.Services().ByName("AdminService")
}

// WebhookServiceDescriptor describes WebhookService as the protos declare it.
func WebhookServiceDescriptor() protoreflect.ServiceDescriptor {
	return pb.File_pointledger_v1_webhook_proto.Services().ByName("WebhookService")
}

// Procedures are the procedures of service, as the paths they are served
// on: /package.Service/Method.
func Procedures(service protoreflect.ServiceDescriptor) []string {
	methods := service.Methods()
	out := make([]string, methods.Len())
	for i := range methods.Len() {
		out[i] = "/" + string(service.FullName()) + "/" + string(methods.Get(i).Name())
	}
	return out
}

// KnownProcedures passes the requests for a procedure of service on to next,
// and answers any other path under the service's prefix unimplemented, in
// the caller's protocol, before next sees it. next is the service behind its
// authentication: a mistyped method is told that it does not exist, not that
// the caller may not call it, and needs no token to be told so (the
// procedures are in the protos, which are public). opts are the handlers'
// options, whose codecs tell the protocols apart.
func KnownProcedures(service protoreflect.ServiceDescriptor, next http.Handler, opts ...connect.HandlerOption) http.Handler {
	known := make(map[string]bool)
	// The methods without side effects, which may be called with GET.
	readable := make(map[string]bool)
	methods := service.Methods()
	for i, p := range Procedures(service) {
		known[p] = true
		options, _ := methods.Get(i).Options().(*descriptorpb.MethodOptions)
		if options.GetIdempotencyLevel() == descriptorpb.MethodOptions_NO_SIDE_EFFECTS {
			readable[p] = true
		}
	}
	errw := connect.NewErrorWriter(opts...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !known[r.URL.Path] {
			unknownProcedure(errw, w, r)
			return
		}
		if r.Method == http.MethodGet && readable[r.URL.Path] {
			// connect-go answers a GET form without its parameters, or with
			// a message that is not base64, without a reason (and the
			// latter as unknown, HTTP 500).
			if problem := getFormProblem(r.URL.Query()); problem != "" {
				_ = errw.Write(w, r, malformedError(problem))
				return
			}
		}
		next.ServeHTTP(&protocolRefusals{ResponseWriter: w, r: r, errw: errw}, r)
	})
}

// NoService answers what is under no service's path: an RPC (a POST in one
// of the protocols) unimplemented, as KnownProcedures answers an unknown
// method, and anything else a bare 404, which says nothing about the host or
// the process.
func NoService(opts ...connect.HandlerOption) http.Handler {
	errw := connect.NewErrorWriter(opts...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && errw.IsSupported(r) {
			unknownProcedure(errw, w, r)
			return
		}
		http.NotFound(w, r)
	})
}

const unknownProcedureMessage = "no such procedure: the services and their methods are in the protos (pointledger.v1)"

// unknownProcedure answers unimplemented in the caller's protocol: gRPC and
// gRPC-Web with grpc-status 12, a Connect stream in its end message, and a
// Connect unary call (or what is no protocol at all) with HTTP 404, the
// status connect-go's handlers answer an unknown path with, and a Connect
// error as its body.
func unknownProcedure(errw *connect.ErrorWriter, w http.ResponseWriter, r *http.Request) {
	err := withReason(connect.NewError(connect.CodeUnimplemented, errors.New(unknownProcedureMessage)), ReasonUnknownProcedure)
	_ = errw.Write(statusWriter{ResponseWriter: w, status: http.StatusNotFound}, r, err)
}

// protocolRefusals gives the refusals connect-go's handlers answer with a
// bare HTTP status, before any interceptor, a Connect error with a reason
// and a message: 415 for a content type (or a GET's encoding) that no
// codec reads, 405 for another HTTP method. It passes everything else on.
type protocolRefusals struct {
	http.ResponseWriter
	r    *http.Request
	errw *connect.ErrorWriter
}

func (w *protocolRefusals) WriteHeader(status int) {
	var err *connect.Error
	switch status {
	case http.StatusUnsupportedMediaType:
		err = withReason(connect.NewError(connect.CodeInvalidArgument, errors.New(unsupportedMediaType(w.r))), ReasonUnsupportedMediaType)
	case http.StatusMethodNotAllowed:
		err = withReason(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("HTTP method %s is not allowed for %s: use %s",
			w.r.Method, w.r.URL.Path, w.Header().Get("Allow"))), ReasonMethodNotAllowed)
	default:
		w.ResponseWriter.WriteHeader(status)
		return
	}
	_ = w.errw.Write(statusWriter{ResponseWriter: w.ResponseWriter, status: status}, w.r, err)
}

// Flush lets connect-go stream (Reconcile) through protocolRefusals.
func (w *protocolRefusals) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap gives http.ResponseController the connection's own writer.
func (w *protocolRefusals) Unwrap() http.ResponseWriter { return w.ResponseWriter }

const protocolsSpoken = "application/json or application/proto (Connect), application/grpc (gRPC) or application/grpc-web (gRPC-Web)"

// unsupportedMediaType says why connect-go answered r 415.
func unsupportedMediaType(r *http.Request) string {
	if r.Method == http.MethodGet {
		if enc := r.URL.Query().Get("encoding"); enc != "json" && enc != "proto" {
			return fmt.Sprintf("encoding %q is not one ledgerd reads: a GET names encoding=json or encoding=proto", enc)
		}
		return "a GET carries its request in the query (encoding and message), not in a body"
	}
	spoken := protocolsSpoken
	if streams(r.URL.Path) {
		spoken = streamProtocolsSpoken
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		return fmt.Sprintf("content type %q is not one ledgerd reads for %s: send %s", ct, r.URL.Path, spoken)
	}
	return "the request has no Content-Type: send " + spoken
}

// streamProtocolsSpoken: a procedure that answers with a stream
// (Reconcile) takes the Connect streaming content types, not the unary
// ones.
const streamProtocolsSpoken = "application/connect+json or application/connect+proto (Connect: it answers with a stream), application/grpc (gRPC) or application/grpc-web (gRPC-Web)"

// streams says whether the procedure served on path answers with a stream.
func streams(path string) bool {
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(path, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return false
	}
	m, ok := d.(protoreflect.MethodDescriptor)
	return ok && m.IsStreamingServer()
}

// getFormProblem says what is wrong with the query of a GET call, as the
// Connect protocol has it (encoding, message, base64 if the message is
// base64url, padded or not); "" if nothing connect-go would refuse
// alone. An unknown encoding is connect-go's 415 (protocolRefusals).
func getFormProblem(query url.Values) string {
	const form = "a GET carries its request as ?encoding=json&message=<the JSON, URL-escaped> (or encoding=proto&base64=1&message=<base64url>)"
	if !query.Has("encoding") || !query.Has("message") {
		return "the query names no encoding or no message: " + form
	}
	if query.Get("base64") == "1" {
		message, enc := query.Get("message"), base64.RawURLEncoding
		if strings.HasSuffix(message, "=") {
			enc = base64.URLEncoding
		}
		if _, err := enc.DecodeString(message); err != nil {
			return "the message is not base64url: " + form
		}
	}
	return ""
}

// statusWriter answers HTTP status instead of the status that
// connect.ErrorWriter derives from the code, where it writes one (a Connect
// unary error); it keeps gRPC's 200.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w statusWriter) WriteHeader(status int) {
	if status != http.StatusOK {
		status = w.status
	}
	w.ResponseWriter.WriteHeader(status)
}
