package auth

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Role is what a caller may do.
type Role string

const (
	RoleService Role = "service"
	RoleUser    Role = "user"
	RoleAdmin   Role = "admin"
	// RolePeer is another ledgerd of the deployment forwarding a mutation
	// to the instance that owns its user (package affinity): the caller
	// was authenticated and authorized by the instance it reached first.
	RolePeer Role = "peer"
	// RoleSupport answers members: reads everything an admin reads,
	// adjusts within SupportLimits, freezes and unfreezes, voids holds.
	RoleSupport Role = "support"
	// roleInsecureDev is every caller of a server started with
	// -insecure-dev: it may do what service and admin may.
	roleInsecureDev Role = "insecure-dev"
)

// Identity is who is calling: a role, and the user id (role user) or the
// token's name (service, admin).
type Identity struct {
	Role    Role
	Subject string
}

func (id Identity) is(r Role) bool { return id.Role == r || id.Role == roleInsecureDev }

// key names the caller's rate limit bucket.
func (id Identity) key() string { return string(id.Role) + ":" + id.Subject }

type identityKey struct{}

// WithIdentity returns ctx carrying id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the caller's identity, if it was authenticated.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// MaxTokenBytes bounds the bearer token read from a request.
const MaxTokenBytes = 4096

// Reasons of the errors this package returns (google.rpc.ErrorInfo).
const (
	ReasonMissingToken = "MISSING_TOKEN"
	ReasonInvalidToken = "INVALID_TOKEN"
	ReasonTokenExpired = "TOKEN_EXPIRED"
	ReasonRoleDenied   = "ROLE_NOT_ALLOWED"
	ReasonOtherUser    = "OTHER_USER"
	ReasonRateLimited  = "RATE_LIMITED"
)

// authError is a refusal with its reason; the middleware and the
// interceptor turn it into a Connect error.
type authError struct {
	denied bool // permission_denied, else unauthenticated
	reason string
	msg    string
}

func (e *authError) Error() string { return e.msg }

func unauthenticated(reason, msg string) error {
	return &authError{reason: reason, msg: msg}
}

func denied(reason, msg string) error {
	return &authError{denied: true, reason: reason, msg: msg}
}

// Authenticator resolves bearer tokens to identities.
type Authenticator struct {
	creds    *Credentials
	keys     []any // HMAC keys, as jwt wants them
	hashes   [][]byte
	insecure bool
	// Now is the clock that judges token expiry.
	Now func() time.Time
	// MaxLifetime is how far ahead of Now a user token's exp may be (plus
	// clockSkew): a token leaked, or minted by mistake with a far exp, would
	// otherwise work until its key is retired.
	MaxLifetime time.Duration
}

// DefaultUserTokenMaxLifetime is MaxLifetime unless set otherwise.
const DefaultUserTokenMaxLifetime = 24 * time.Hour

// NewAuthenticator checks tokens against creds.
func NewAuthenticator(creds *Credentials) (*Authenticator, error) {
	if err := creds.check(); err != nil {
		return nil, err
	}
	a := &Authenticator{creds: creds, Now: time.Now, MaxLifetime: DefaultUserTokenMaxLifetime}
	for i := range creds.UserTokenKeys {
		k, _ := creds.key(i) // checked
		a.keys = append(a.keys, k)
	}
	for _, t := range creds.Tokens {
		h, _ := hex.DecodeString(t.SHA256) // checked
		a.hashes = append(a.hashes, h)
	}
	return a, nil
}

// InsecureDev is an Authenticator that asks for no token and treats every
// caller as service and admin. For local development only.
func InsecureDev() *Authenticator { return &Authenticator{insecure: true, Now: time.Now} }

// Insecure reports whether a is InsecureDev.
func (a *Authenticator) Insecure() bool { return a.insecure }

// DeriveKey returns a key of 32 bytes for purpose, derived with HKDF-SHA256
// from the first user token key (the one that signs): a secret every
// instance of a deployment already shares, so a key derived from it needs
// no configuration of its own, and shows nothing of the key it comes from.
// Rotating the signing key changes it. ok is false under InsecureDev and
// for credentials without user token keys: there is no secret to derive
// from.
func (a *Authenticator) DeriveKey(purpose string) (key []byte, ok bool) {
	if len(a.keys) == 0 {
		return nil, false
	}
	signing, _ := a.creds.key(0) // checked by NewAuthenticator
	key, err := hkdf.Key(sha256.New, signing, nil, purpose, 32)
	if err != nil {
		panic(fmt.Sprintf("hkdf: %v", err)) // only for lengths past 255 hashes
	}
	return key, true
}

// Authenticate resolves the Authorization header's value to an identity.
func (a *Authenticator) Authenticate(header string) (Identity, error) {
	if a.insecure {
		return Identity{Role: roleInsecureDev, Subject: "insecure-dev"}, nil
	}
	if header == "" {
		return Identity{}, unauthenticated(ReasonMissingToken, "missing Authorization: Bearer token")
	}
	if len(header) > MaxTokenBytes {
		return Identity{}, unauthenticated(ReasonInvalidToken, "token too long")
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return Identity{}, unauthenticated(ReasonInvalidToken, "Authorization must be \"Bearer <token>\"")
	}
	if strings.Count(token, ".") == 2 {
		return a.userToken(token)
	}
	// HashToken's hash, as bytes: not written in hex to be read back
	// (three allocations a call, issue 37).
	got := sha256.Sum256([]byte(token))
	match := -1
	for i, h := range a.hashes { // every hash, so the time does not tell which matched
		if subtle.ConstantTimeCompare(h, got[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return Identity{}, unauthenticated(ReasonInvalidToken, "unknown token")
	}
	t := a.creds.Tokens[match]
	return Identity{Role: t.Role, Subject: t.Name}, nil
}

// clockSkew is how far past its expiry a user token is still accepted.
const clockSkew = 30 * time.Second

func (a *Authenticator) userToken(token string) (Identity, error) {
	if len(a.keys) == 0 {
		return Identity{}, unauthenticated(ReasonInvalidToken, "user tokens are not configured")
	}
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(a.creds.Issuer),
		jwt.WithAudience(a.creds.Audience),
		jwt.WithLeeway(clockSkew),
		jwt.WithTimeFunc(a.Now),
		// One token, one spelling: lax base64 ignores a segment's unused
		// low bits, so each token would have other strings that pass too.
		jwt.WithStrictDecoding(),
	)
	var claims userClaims
	tok, err := p.ParseWithClaims(token, &claims, func(*jwt.Token) (any, error) {
		keys := make([]jwt.VerificationKey, len(a.keys))
		for i, k := range a.keys {
			keys[i] = k
		}
		return jwt.VerificationKeySet{Keys: keys}, nil
	})
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return Identity{}, unauthenticated(ReasonTokenExpired, "token expired")
	case err != nil:
		return Identity{}, unauthenticated(ReasonInvalidToken, "invalid token")
	}
	// The signature is good from here on, so the refusals may say why: only
	// the holder of a key could have made these tokens.
	if _, ok := tok.Header["crit"]; ok {
		// RFC 7515 4.1.11: an extension named in crit must be understood or
		// the token refused; we understand none.
		return Identity{}, unauthenticated(ReasonInvalidToken, "token header has crit: no extension is understood")
	}
	for name := range claims.raw {
		// encoding/json fills RegisteredClaims ignoring case ("EXP", "ſub"),
		// so such a member would pass unchecked here, or override the real
		// claim for us while other verifiers, case-sensitive as RFC 7519
		// wants, read the real one.
		for _, r := range registeredClaims {
			if name != r && strings.EqualFold(name, r) {
				return Identity{}, unauthenticated(ReasonInvalidToken, fmt.Sprintf("token claim %q: claim names are case-sensitive", name))
			}
		}
	}
	for _, name := range []string{"exp", "iat", "nbf"} {
		// jwt's NumericDate also takes a quoted number; RFC 7519 wants a
		// JSON number, and another verifier may read a string otherwise.
		if v, ok := claims.raw[name]; ok && !isJSONNumber(v) {
			return Identity{}, unauthenticated(ReasonInvalidToken, "token "+name+" must be a JSON number")
		}
	}
	if latest := a.Now().Add(a.MaxLifetime + clockSkew); claims.ExpiresAt.After(latest) {
		return Identity{}, unauthenticated(ReasonInvalidToken,
			fmt.Sprintf("token lifetime too long: exp is more than %v ahead", a.MaxLifetime))
	}
	if ledger.ValidateUserID(claims.Subject) != nil {
		return Identity{}, unauthenticated(ReasonInvalidToken, "token subject is not a valid user id")
	}
	return Identity{Role: RoleUser, Subject: claims.Subject}, nil
}

// userClaims are the registered claims and the payload's raw members, to
// check what jwt's types let through.
type userClaims struct {
	jwt.RegisteredClaims
	raw map[string]json.RawMessage
}

func (c *userClaims) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &c.raw); err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	if err := json.Unmarshal(b, &c.RegisteredClaims); err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	return nil
}

// registeredClaims are the names jwt.RegisteredClaims reads.
var registeredClaims = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti"}

// isJSONNumber reports whether v, a valid JSON value, is a number.
func isJSONNumber(v json.RawMessage) bool {
	return len(v) > 0 && (v[0] == '-' || '0' <= v[0] && v[0] <= '9')
}

// MintUserToken signs a user token for user, valid for ttl, with the first
// user token key of creds.
func MintUserToken(creds *Credentials, user string, ttl time.Duration, now time.Time) (string, error) {
	if err := ledger.ValidateUserID(user); err != nil {
		return "", err
	}
	if ttl <= 0 {
		return "", fmt.Errorf("token lifetime %v: want more than 0", ttl)
	}
	if len(creds.UserTokenKeys) == 0 {
		return "", errors.New("the credentials have no user_token_keys")
	}
	key, err := creds.key(0)
	if err != nil {
		return "", err
	}
	claims := jwt.RegisteredClaims{
		Issuer:    creds.Issuer,
		Audience:  jwt.ClaimStrings{creds.Audience},
		Subject:   user,
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
}
