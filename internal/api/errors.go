package api

import (
	"context"
	"errors"
	"log/slog"
	"maps"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/pointledger/pointledger/internal/ledger"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail on every error.
const ErrorDomain = "pointledger.v1"

// ReasonInternal is the reason of an internal error: a bug or an unexpected
// failure of the store, whose details stay in the log.
const ReasonInternal = "INTERNAL"

// The reasons of requests refused before they reach a method: what is not
// a request of the API at all.
const (
	// ReasonMalformedRequest: the body is not a request message (broken
	// JSON, an unknown field, a value of the wrong type, bytes that are
	// not protobuf); invalid_argument.
	ReasonMalformedRequest = "MALFORMED_REQUEST"
	// ReasonUnsupportedMediaType: the Content-Type (or a GET's encoding)
	// is none that ledgerd speaks; invalid_argument, HTTP 415.
	ReasonUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
	// ReasonMethodNotAllowed: an HTTP method other than POST, or GET for a
	// method with side effects; invalid_argument, HTTP 405.
	ReasonMethodNotAllowed = "METHOD_NOT_ALLOWED"
	// ReasonUnknownProcedure: the path names no method of the services;
	// unimplemented, HTTP 404.
	ReasonUnknownProcedure = "UNKNOWN_PROCEDURE"
)

var codes = map[ledger.Kind]connect.Code{
	ledger.KindInvalid:            connect.CodeInvalidArgument,
	ledger.KindFailedPrecondition: connect.CodeFailedPrecondition,
	ledger.KindNotFound:           connect.CodeNotFound,
	ledger.KindAlreadyExists:      connect.CodeAlreadyExists,
	ledger.KindAborted:            connect.CodeAborted,
	ledger.KindUnavailable:        connect.CodeUnavailable,
}

// toConnect is the one place where errors become wire codes. Domain errors
// keep their message and carry their reason in a google.rpc.ErrorInfo (a
// replayed refusal also has metadata replayed: "true"); the caller's own
// cancellation stays a cancellation; anything else is logged and becomes
// INTERNAL without its details.
func (s *LedgerService) toConnect(ctx context.Context, err error) error {
	return toConnect(ctx, s.log, err)
}

func toConnect(ctx context.Context, log *slog.Logger, err error) error {
	if e, ok := ledger.AsError(err); ok {
		if code, ok := codes[e.Kind]; ok {
			info := &errdetails.ErrorInfo{Reason: e.Reason, Domain: ErrorDomain}
			if len(e.Metadata) > 0 || e.Replayed {
				info.Metadata = maps.Clone(e.Metadata)
				if info.Metadata == nil {
					info.Metadata = map[string]string{}
				}
			}
			if e.Replayed {
				info.Metadata["replayed"] = "true"
			}
			return withInfo(connect.NewError(code, e), info)
		}
	}
	switch {
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	log.ErrorContext(ctx, "internal error", "error", err)
	return withReason(connect.NewError(connect.CodeInternal, errors.New("internal error; the request may be retried with the same request_id")), ReasonInternal)
}

func withReason(err *connect.Error, reason string) *connect.Error {
	return withInfo(err, &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
}

func withInfo(err *connect.Error, info *errdetails.ErrorInfo) *connect.Error {
	// Marshaled deterministically (metadata by key), so that the same
	// error has the same bytes: an error with two metadata keys (a
	// replayed refusal's spendable and replayed) would otherwise vary.
	b, merr := proto.MarshalOptions{Deterministic: true}.Marshal(info)
	if merr != nil {
		return err
	}
	if d, derr := connect.NewErrorDetail(&anypb.Any{TypeUrl: "type.googleapis.com/" + string(info.ProtoReflect().Descriptor().FullName()), Value: b}); derr == nil {
		err.AddDetail(d)
	}
	return err
}
