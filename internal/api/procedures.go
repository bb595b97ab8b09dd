package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

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
	for _, p := range Procedures(service) {
		known[p] = true
	}
	errw := connect.NewErrorWriter(opts...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !known[r.URL.Path] {
			unknownProcedure(errw, w, r)
			return
		}
		next.ServeHTTP(w, r)
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
	ct := r.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "application/grpc") || strings.HasPrefix(ct, "application/connect+") {
		_ = errw.Write(w, r, connect.NewError(connect.CodeUnimplemented, errors.New(unknownProcedureMessage)))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	body, _ := json.Marshal(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{connect.CodeUnimplemented.String(), unknownProcedureMessage})
	_, _ = w.Write(body)
}
