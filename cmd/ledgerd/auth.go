package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/ledger"
)

// authConfig is who may call ledgerd serve, and how often.
type authConfig struct {
	file      string
	insecure  bool
	rateLimit float64
	rateBurst int
	// userTokenMaxLifetime is how far ahead a user token's exp may be.
	userTokenMaxLifetime time.Duration
	// What a support token may adjust: at most supportMaxAdjustment at
	// once, supportDailyLimit a day (UTC) per operator.
	supportMaxAdjustment, supportDailyLimit string
}

func (a *authConfig) flags(fs *flag.FlagSet, getenv func(string) string) error {
	s := newSettings(fs, getenv)
	s.String(&a.file, "auth-file", "LEDGER_AUTH_FILE", "",
		"credentials file (JSON: user token keys, service and admin token hashes); see docs/operations.md, Security")
	// Deliberately a flag only: no environment variable turns security off.
	fs.BoolVar(&a.insecure, "insecure-dev", false,
		"serve WITHOUT authentication, every caller being service and admin; local development only")
	s.Float(&a.rateLimit, "rate-limit", "LEDGER_RATE_LIMIT", 0, "requests a second each caller (token) may make; 0: no limit")
	s.Int(&a.rateBurst, "rate-burst", "LEDGER_RATE_BURST", 0, "requests a caller may make at once above -rate-limit; 0: the rate, at least 1")
	userTokenMaxLifetimeFlag(s, &a.userTokenMaxLifetime)
	s.String(&a.supportMaxAdjustment, "support-max-adjustment", "LEDGER_SUPPORT_MAX_ADJUSTMENT", "100",
		"largest adjustment a support token may make (role support); larger ones are an admin's")
	s.String(&a.supportDailyLimit, "support-daily-limit", "LEDGER_SUPPORT_DAILY_LIMIT", "1000",
		"largest sum of one support operator's adjustments in a day (UTC), across every instance")
	return s.err()
}

// supportLimits are the limits of a support token's adjustments, their
// allowances kept in allowances.
func (a *authConfig) supportLimits(allowances auth.Allowances) (auth.SupportLimits, error) {
	perAdjustment, err := ledger.ParseAmount(a.supportMaxAdjustment, 18)
	if err != nil {
		return auth.SupportLimits{}, fmt.Errorf("-support-max-adjustment (LEDGER_SUPPORT_MAX_ADJUSTMENT): %w", err)
	}
	perDay, err := ledger.ParseAmount(a.supportDailyLimit, 18)
	if err != nil {
		return auth.SupportLimits{}, fmt.Errorf("-support-daily-limit (LEDGER_SUPPORT_DAILY_LIMIT): %w", err)
	}
	if perAdjustment.GreaterThan(perDay) {
		return auth.SupportLimits{}, fmt.Errorf("-support-max-adjustment %s is more than -support-daily-limit %s", perAdjustment, perDay)
	}
	return auth.SupportLimits{PerAdjustment: perAdjustment, PerDay: perDay, Allowances: allowances}, nil
}

// userTokenMaxLifetimeFlag registers -user-token-max-lifetime. serve (what it
// accepts) and token (what it mints) both read it, from the same variable, so
// that a deployment does not mint tokens its servers refuse.
func userTokenMaxLifetimeFlag(s *settings, d *time.Duration) {
	s.Duration(d, "user-token-max-lifetime", "LEDGER_USER_TOKEN_MAX_LIFETIME", auth.DefaultUserTokenMaxLifetime,
		"longest a user token may live: serve refuses a token whose exp is further ahead, token refuses a longer -ttl")
}

func checkUserTokenMaxLifetime(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("-user-token-max-lifetime (LEDGER_USER_TOKEN_MAX_LIFETIME) must be more than 0, not %v", d)
	}
	return nil
}

// authenticator builds the authenticator from the credentials file or, for
// the credentials JSON itself, LEDGER_AUTH_JSON; without either ledgerd
// refuses to serve unless -insecure-dev.
func (a *authConfig) authenticator(getenv func(string) string) (*auth.Authenticator, error) {
	if !(a.rateLimit >= 0) || math.IsInf(a.rateLimit, 0) || a.rateBurst < 0 { // !(x >= 0) refuses NaN too
		return nil, errors.New("-rate-limit (LEDGER_RATE_LIMIT) must be a finite number of requests a second, 0 for no limit, " +
			"and -rate-burst (LEDGER_RATE_BURST) not negative")
	}
	if err := checkUserTokenMaxLifetime(a.userTokenMaxLifetime); err != nil {
		return nil, err
	}
	inline := getenv("LEDGER_AUTH_JSON")
	if a.insecure {
		if a.file != "" || inline != "" {
			return nil, errors.New("-insecure-dev and credentials (-auth-file, LEDGER_AUTH_FILE, LEDGER_AUTH_JSON) exclude each other")
		}
		return auth.InsecureDev(), nil
	}
	var creds *auth.Credentials
	var err error
	switch {
	case a.file != "" && inline != "":
		return nil, errors.New("credentials come from -auth-file (LEDGER_AUTH_FILE) or LEDGER_AUTH_JSON, not both")
	case a.file != "":
		creds, err = auth.LoadCredentials(a.file)
	case inline != "":
		creds, err = auth.ParseCredentials([]byte(inline))
		if err != nil {
			err = fmt.Errorf("LEDGER_AUTH_JSON: %w", err)
		}
	default:
		return nil, errors.New("no credentials configured: set -auth-file (LEDGER_AUTH_FILE) or LEDGER_AUTH_JSON " +
			"(see docs/operations.md, Security), or start with -insecure-dev for local development")
	}
	if err != nil {
		return nil, err
	}
	authn, err := auth.NewAuthenticator(creds)
	if err != nil {
		return nil, err
	}
	authn.MaxLifetime = a.userTokenMaxLifetime
	return authn, nil
}

// warnInsecure says loudly, at start and then every interval until ctx
// ends, that anyone may call.
func warnInsecure(ctx context.Context, log *slog.Logger, interval time.Duration) {
	say := func() {
		log.Warn("INSECURE: -insecure-dev is set: no authentication, every caller may move any user's points and use the admin API; never do this outside local development")
	}
	say()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				say()
			}
		}
	}()
}

// token mints a user token, or makes new secrets for a credentials file.
func token(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	s := newSettings(fs, getenv)
	var file string
	s.String(&file, "auth-file", "LEDGER_AUTH_FILE", "", "credentials file whose first user token key signs")
	user := fs.String("user", "", "mint a user token for this user id")
	ttl := fs.Duration("ttl", time.Hour, "lifetime of the user token, at most -user-token-max-lifetime")
	newToken := fs.String("new", "", "instead: print a new random service, admin, support or peer token (stdout) and its credentials entry (stderr); or `key` for a new user token key")
	name := fs.String("name", "", "with -new service|admin|support|peer: the token's name in the credentials file (a support token's is the operator on its entries)")
	var maxLifetime time.Duration
	userTokenMaxLifetimeFlag(s, &maxLifetime)
	if err := s.err(); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch *newToken {
	case "":
	case "key":
		fmt.Fprintln(stdout, auth.NewKey())
		return nil
	case string(auth.RoleService), string(auth.RoleAdmin), string(auth.RolePeer), string(auth.RoleSupport):
		if *name == "" {
			return errors.New("-new " + *newToken + " needs -name")
		}
		secret := auth.NewSecret()
		fmt.Fprintln(stdout, secret)
		fmt.Fprintf(stderr, "add to \"tokens\" of the credentials file: {\"name\": %q, \"role\": %q, \"sha256\": %q}\n",
			*name, *newToken, auth.HashToken(secret))
		return nil
	default:
		return fmt.Errorf("-new %q: want service, admin, support, peer or key", *newToken)
	}
	if *user == "" {
		return errors.New("give -user (or -new)")
	}
	if err := checkUserTokenMaxLifetime(maxLifetime); err != nil {
		return err
	}
	if *ttl > maxLifetime {
		return fmt.Errorf("-ttl %v is longer than -user-token-max-lifetime %v (LEDGER_USER_TOKEN_MAX_LIFETIME): ledgerd serve would refuse the token", *ttl, maxLifetime)
	}
	if file == "" {
		return errors.New("give -auth-file (LEDGER_AUTH_FILE)")
	}
	creds, err := auth.LoadCredentials(file)
	if err != nil {
		return err
	}
	tok, err := auth.MintUserToken(creds, *user, *ttl, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
