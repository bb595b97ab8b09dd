package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
	return string(appendSignatures(make([]byte, 0, len(secrets)*signatureLen), secrets, msgID, ts.Unix(), body))
}

// signatureLen is one signature's length with its separator: "v1," and
// the base64 of 32 bytes, and a space.
const signatureLen = len(signatureVersion) + 1 + 44 + 1

func appendSignatures(b []byte, secrets []Secret, msgID string, unix int64, body []byte) []byte {
	for i, s := range secrets {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, signatureVersion+","...)
		var sum [sha256.Size]byte
		b = base64.StdEncoding.AppendEncode(b, mac(sum[:0], s, msgID, unix, body))
	}
	return b
}

// SetHeaders sets the three Standard Webhooks headers of a delivery on h.
func SetHeaders(h http.Header, secrets []Secret, msgID string, ts time.Time, body []byte) {
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, Sign(secrets, msgID, ts, body))
}

// mac appends HMAC-SHA256(s, msgID.unix.body) to b. The HMAC keyed with s
// is kept for the next message signed with s (macs): keying one costs two
// SHA-256 blocks and its state, for every event otherwise.
func mac(b []byte, s Secret, msgID string, unix int64, body []byte) []byte {
	pool := macs.pool(s.key)
	m := pool.Get().(*keyedMAC)
	m.h.Reset()
	m.buf = append(m.buf[:0], msgID...)
	m.buf = append(m.buf, '.')
	m.buf = strconv.AppendInt(m.buf, unix, 10)
	m.buf = append(m.buf, '.')
	_, _ = m.h.Write(m.buf)
	_, _ = m.h.Write(body)
	m.sum = m.h.Sum(m.sum[:0])
	b = append(b, m.sum...)
	pool.Put(m)
	return b
}

// keyedMAC is an HMAC keyed with one secret, and its scratch.
type keyedMAC struct {
	h   hash.Hash
	buf []byte // msgID.timestamp.
	sum []byte
}

// macs keeps, for each signing key in use, a pool of HMACs keyed with it.
// It forgets them all when it holds more than maxKeyedPools keys (secrets
// rotated out, endpoints deleted), so that it stays small.
var macs = &keyedMACs{pools: map[string]*sync.Pool{}}

const maxKeyedPools = 1024

type keyedMACs struct {
	mu    sync.Mutex
	pools map[string]*sync.Pool
}

func (k *keyedMACs) pool(key []byte) *sync.Pool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.pools[string(key)]; ok {
		return p
	}
	if len(k.pools) >= maxKeyedPools {
		clear(k.pools)
	}
	key = bytes.Clone(key)
	p := &sync.Pool{New: func() any {
		return &keyedMAC{h: hmac.New(sha256.New, key), buf: make([]byte, 0, 64), sum: make([]byte, 0, sha256.Size)}
	}}
	k.pools[string(key)] = p
	return p
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
			if hmac.Equal(got, mac(nil, s, msgID, unix, body)) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrVerify)
}
