package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	connectcors "connectrpc.com/cors"
	"github.com/rs/cors"
)

// corsMaxAge is how long a browser may keep a preflight's answer, in
// seconds: Chromium's cap.
const corsMaxAge = 7200

// parseCORSOrigins reads -cors-origins: exact browser origins, separated by
// commas. Each is scheme://host[:port] as a browser sends it in Origin:
// http or https, no path (not even /), no query, no user, no default port.
// "*" is refused, and so is any other wildcard: every origin is named.
func parseCORSOrigins(list string) ([]string, error) {
	var origins []string
	for o := range strings.SplitSeq(list, ",") {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if err := checkOrigin(o); err != nil {
			return nil, fmt.Errorf("-cors-origins (LEDGER_CORS_ORIGINS): %q: %w", o, err)
		}
		origins = append(origins, strings.ToLower(o))
	}
	return origins, nil
}

func checkOrigin(o string) error {
	if strings.Contains(o, "*") {
		return fmt.Errorf("no wildcards: name each origin that may call (see docs/operations.md, Security)")
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || strings.HasSuffix(u.Host, ":") ||
		!strings.EqualFold(o, u.Scheme+"://"+u.Host) {
		return fmt.Errorf("want scheme://host[:port] (http or https), with no path, not even /, as a browser sends it in Origin")
	}
	if port := u.Port(); port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s: want 1 to 65535", port)
		}
		if (u.Scheme == "http" && n == 80) || (u.Scheme == "https" && n == 443) {
			return fmt.Errorf("a browser sends %s://%s, without the default port", u.Scheme, u.Hostname())
		}
	}
	return nil
}

// corsHandler lets scripts of origins call what it wraps from a browser:
// it answers their preflights itself, before anything asks for a token (a
// preflight carries none), and adds the Access-Control-* headers to the
// answers of their calls, which still need their tokens. The methods and
// headers are those the Connect, gRPC-Web and Connect JSON protocols use
// (connectrpc.com/cors), and Authorization for the bearer token; no
// credentials (cookies) are allowed, since tokens are the credentials.
// Without origins it wraps nothing: no CORS header at all, and rs/cors never
// sees an empty list, which it would take as every origin.
func corsHandler(origins []string) func(http.Handler) http.Handler {
	if len(origins) == 0 {
		return func(h http.Handler) http.Handler { return h }
	}
	c := cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: connectcors.AllowedMethods(),
		AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization"),
		ExposedHeaders: connectcors.ExposedHeaders(),
		MaxAge:         corsMaxAge,
	})
	return c.Handler
}
