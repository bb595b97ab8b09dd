package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a delivery, as Standard Webhooks names them.
const (
	// HeaderID is the event's id, the same on every attempt: a receiver
	// dedupes on it.
	HeaderID = "webhook-id"
	// HeaderTimestamp is the attempt's time, in unix seconds; it is signed,
	// so a receiver can refuse a replay of an old attempt.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature is one signature per secret, space-separated.
	HeaderSignature = "webhook-signature"
)

// signatureVersion marks a symmetric (HMAC-SHA256) signature.
const signatureVersion = "v1"

// Sign returns the webhook-signature header of a message: for each secret,
// "v1," and the base64 of HMAC-SHA256(secret, id.timestamp.body), joined
// by spaces. During a rotation both the new and the old secret sign, and a
// receiver that knows either verifies. msgID must not contain a full stop,
// or the signed content would be ambiguous; the ledger's ids are ULIDs.
func Sign(secrets []Secret, msgID string, ts time.Time, body []byte) string {
	signatures := make([]string, 0, len(secrets))
	for _, s := range secrets {
		signatures = append(signatures, signatureVersion+","+base64.StdEncoding.EncodeToString(mac(s, msgID, ts.Unix(), body)))
	}
	return strings.Join(signatures, " ")
}

// SetHeaders sets the three Standard Webhooks headers of a delivery on h.
func SetHeaders(h http.Header, secrets []Secret, msgID string, ts time.Time, body []byte) {
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(secrets, msgID, ts, body))
}

func mac(s Secret, msgID string, unix int64, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(msgID))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, unix, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// DefaultTolerance is how far from now Verify accepts a timestamp, as the
// Standard Webhooks libraries do.
const DefaultTolerance = 5 * time.Minute

// ErrVerify is the error of every failed verification: a receiver answers
// it with a 4xx and learns nothing more about what was wrong.
var ErrVerify = errors.New("webhook: signature does not verify")

// Verify checks a delivery as a receiver would: the three headers are
// there, the timestamp is within tolerance of now, and one v1 signature is
// the MAC of one of the secrets (compared in constant time). It is here
// for the tests and the examples; ledgerd only signs.
func Verify(secrets []Secret, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	msgID, stamp, header := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if msgID == "" || stamp == "" || header == "" {
		return fmt.Errorf("%w: missing %s, %s or %s", ErrVerify, HeaderID, HeaderTimestamp, HeaderSignature)
	}
	unix, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s is not unix seconds", ErrVerify, HeaderTimestamp)
	}
	if d := now.Sub(time.Unix(unix, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s is %s from now, beyond %s", ErrVerify, HeaderTimestamp, d, tolerance)
	}
	for field := range strings.FieldsSeq(header) {
		version, encoded, ok := strings.Cut(field, ",")
		if !ok || version != signatureVersion {
			continue // another scheme (v1a) or garbage: not ours to judge
		}
		got, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			continue
		}
		for _, s := range secrets {
			if hmac.Equal(got, mac(s, msgID, unix, body)) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrVerify)
}
