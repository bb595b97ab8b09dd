package auth

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
)

// errorDomain is the domain of every ErrorInfo, the same as api.ErrorDomain.
const errorDomain = "pointledger.v1"

// Middleware authenticates, checks the role and applies the rate limit
// (not to peers) before the request body is read, then passes the identity on in the
// context. It answers refusals in the caller's protocol (Connect, gRPC or
// gRPC-Web). opts are the handlers' options (their codecs tell the protocols
// apart). limiter may be nil (no limit). Refusals are logged at info, like
// other failed calls, without the token.
func Middleware(a *Authenticator, limiter *Limiter, log *slog.Logger, next http.Handler, opts ...connect.HandlerOption) http.Handler {
	errw := connect.NewErrorWriter(opts...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := a.Authenticate(r.Header.Get("Authorization"))
		if err == nil {
			// The path of an RPC is /package.Service/Method: the procedure.
			err = allowProcedure(id, "/"+strings.TrimPrefix(r.URL.Path, "/"))
		}
		// A peer's calls were limited where their callers called; its one
		// bucket would be every caller of that instance at once.
		if err == nil && id.Role != RolePeer && !limiter.Allow(id) {
			err = rateLimited
		}
		if err != nil {
			if connect.CodeOf(toConnect(err)) == connect.CodeUnauthenticated {
				w.Header().Set("WWW-Authenticate", `Bearer realm="pointledger"`)
			}
			ce := toConnect(err)
			log.InfoContext(r.Context(), "rpc refused", "procedure", r.URL.Path, "code", ce.Code().String(),
				"reason", reasonOf(err), "role", string(id.Role), "subject", id.Subject, "remote_addr", r.RemoteAddr)
			_ = errw.Write(w, r, ce)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// ForwardedHeader marks a call that another instance forwarded to the
// user's owner (package affinity); its value names the sender, for logs.
const ForwardedHeader = "Pointledger-Forwarded"

// Forwarded reports whether the call of ctx, with request header h, was
// forwarded by another instance: its caller is a peer, or, on a server
// without authentication (-insecure-dev), where every caller may act as a
// peer, it carries ForwardedHeader. Such a call is never forwarded again.
func Forwarded(ctx context.Context, h http.Header) bool {
	id, ok := IdentityFrom(ctx)
	return ok && (id.Role == RolePeer || id.Role == roleInsecureDev && h.Get(ForwardedHeader) != "")
}

// PeerOnly reports whether r comes from a peer: its token is the peer
// role's, or a asks for no token (-insecure-dev). The peers' health checks
// answer such callers only.
func (a *Authenticator) PeerOnly(r *http.Request) bool {
	id, err := a.Authenticate(r.Header.Get("Authorization"))
	return err == nil && (id.Role == RolePeer || a.insecure)
}

var rateLimited = &authError{reason: ReasonRateLimited, msg: "rate limit exceeded; retry later"}

// toConnect turns a refusal into its Connect error with its reason.
func toConnect(err error) *connect.Error {
	var e *authError
	if !errors.As(err, &e) {
		return connect.NewError(connect.CodeInternal, err)
	}
	code := connect.CodeUnauthenticated
	switch {
	case e == rateLimited:
		code = connect.CodeResourceExhausted
	case e.denied:
		code = connect.CodePermissionDenied
	}
	ce := connect.NewError(code, errors.New(e.msg))
	if d, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: e.reason, Domain: errorDomain}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// Interceptor checks the decoded request against the caller's identity: a
// user token acts only for its own user_id. A request that did not come
// through Middleware has no identity and is refused. A support operator may
// adjust nothing through it: NewInterceptor gives it its limits.
func Interceptor() connect.Interceptor { return interceptor{limits: &SupportLimits{}} }

// NewInterceptor is Interceptor with the limits of a support operator's
// adjustments.
func NewInterceptor(limits SupportLimits) connect.Interceptor { return interceptor{limits: &limits} }

type interceptor struct{ limits *SupportLimits }

func (i interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		id, ok := IdentityFrom(ctx)
		if !ok {
			return nil, toConnect(unauthenticated(ReasonMissingToken, "not authenticated"))
		}
		if err := allowMessage(id, req.Spec().Procedure, req.Any()); err != nil {
			return nil, toConnect(err)
		}
		if id.Role == RoleSupport {
			if isSupportAdjust(id, req.Spec().Procedure) {
				return i.limits.adjust(ctx, id, req, next)
			}
			if v, ok := req.Any().(*pb.VoidRequest); ok {
				// Who let the points go, on the entry.
				if v.Metadata == nil {
					v.Metadata = map[string]string{}
				}
				v.Metadata[OperatorKey] = id.Subject
			}
		}
		return next(ctx, req)
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		id, ok := IdentityFrom(ctx)
		if !ok {
			return toConnect(unauthenticated(ReasonMissingToken, "not authenticated"))
		}
		if err := allowProcedure(id, conn.Spec().Procedure); err != nil {
			return toConnect(err)
		}
		return next(ctx, &checkedConn{StreamingHandlerConn: conn, id: id})
	}
}

// checkedConn checks every message a stream receives.
type checkedConn struct {
	connect.StreamingHandlerConn
	id Identity
}

func (c *checkedConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	if err := allowMessage(c.id, c.Spec().Procedure, msg); err != nil {
		return toConnect(err)
	}
	return nil
}

func reasonOf(err error) string {
	var e *authError
	if errors.As(err, &e) {
		return e.reason
	}
	return ""
}
