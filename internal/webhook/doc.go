// Package webhook is what the dispatcher of events (issue 24,
// internal/dispatch) sends them with, as Standard Webhooks specifies:
// secrets, signatures, the event body, the URL policy against SSRF, the
// delivery client and the retry schedule. It imports the domain (ledger)
// and the standard library only, no SDK; it knows nothing of where
// endpoints or deliveries are stored (the dispatcher keeps them), and the
// API checks endpoint URLs with the same URLPolicy.
//
// Invariants:
//
//   - A delivery carries webhook-id (the event's id, the same on every
//     attempt), webhook-timestamp (the attempt's unix seconds) and
//     webhook-signature: "v1," and the base64 HMAC-SHA256 of
//     "id.timestamp.body" under each secret, space-separated, so that
//     during a rotation a receiver knowing either secret verifies. The
//     specification's test vector is reproduced exactly (sign_test.go).
//   - A Secret never prints: fmt, log and slog see a placeholder; Text is
//     the one way to the key, for showing it once and storing it.
//   - No request goes to an address URLPolicy refuses. The URL is checked
//     when an endpoint is accepted (Check) and at every attempt, and every
//     address dialed is checked after resolution, by the dialer, so a name
//     that resolves elsewhere later (DNS rebinding) is caught where it
//     matters. No proxy stands between (it would be what is checked).
//   - An attempt is one request: redirects are never followed (the 3xx is
//     the answer), it ends at its timeout, and it reads at most
//     MaxResponseBytes of the response before dropping it.
//   - Schedule.NextAttempt is a pure function of the attempts made, the
//     time and a random number: retries are tested without sleeping.
//
// The tests send nothing outside 127.0.0.0/8: they resolve through a
// table and dial through a dialer that records and refuses any other
// address.
package webhook
