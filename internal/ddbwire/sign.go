package ddbwire

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// signer signs requests with AWS Signature Version 4 for one host, region
// and service, over a fixed set of headers (content-length, content-type,
// host, x-amz-date, x-amz-target, and x-amz-security-token with a session
// token: what the SDK's signer signs of such a request). The SDK's
// v4.Signer, general over any request, was 46 of the 64 allocations of a
// call here (BenchmarkTransactWriteItems: 27 with this one), and derived
// the signing key (four HMACs) for every request; this one keeps the
// day's. TestSignatureMatchesSDK checks its signatures with the SDK's
// signer.
type signer struct {
	host, region, service string
	key                   atomic.Pointer[signingKey]
}

// signingKey is the key derived for one secret on one day, with HMACs keyed
// with it (an HMAC's keying is two SHA-256 blocks and five allocations).
type signingKey struct {
	secret, date string
	key          []byte
	macs         sync.Pool // of hash.Hash, HMAC-SHA256 with key
}

// mac is an HMAC-SHA256 keyed with k's key, to be given back with put.
func (k *signingKey) mac() hash.Hash {
	if m, ok := k.macs.Get().(hash.Hash); ok {
		m.Reset()
		return m
	}
	return hmac.New(sha256.New, k.key)
}

func (k *signingKey) put(m hash.Hash) { k.macs.Put(m) }

const (
	signedHeaders          = "content-length;content-type;host;x-amz-date;x-amz-target"
	signedHeadersWithToken = "content-length;content-type;host;x-amz-date;x-amz-security-token;x-amz-target"
)

// hostOf is u's host as the Host header carries it: without a port that is
// the scheme's default, as the SDK's signer writes it.
func hostOf(scheme, host string) string {
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		return host
	}
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		return h
	}
	return host
}

// sign sets X-Amz-Date, X-Amz-Security-Token and Authorization on req, whose
// other signed headers (Content-Type, X-Amz-Target) are set, and whose
// Host is s.host. scratch is reused for the canonical request.
func (s *signer) sign(req *http.Request, creds aws.Credentials, payloadHash string, now time.Time, scratch []byte) []byte {
	amzDate, auth, scratch := s.signature(req.URL.EscapedPath(), req.ContentLength, req.Header["Content-Type"], req.Header["X-Amz-Target"], creds, payloadHash, now, scratch)
	req.Header["X-Amz-Date"] = []string{amzDate}
	if creds.SessionToken != "" {
		req.Header["X-Amz-Security-Token"] = []string{creds.SessionToken}
	}
	req.Header["Authorization"] = []string{string(auth)}
	return scratch
}

// signature is the X-Amz-Date and Authorization of a POST of path with
// these headers (and X-Amz-Security-Token, creds.SessionToken, when
// there is one). scratch is reused for the canonical request.
func (s *signer) signature(path string, contentLength int64, contentType, target []string, creds aws.Credentials, payloadHash string, now time.Time, scratch []byte) (amzDate string, auth, _ []byte) {
	var stamp [16]byte
	amzDate = string(now.UTC().AppendFormat(stamp[:0], "20060102T150405Z"))
	date := amzDate[:8]
	headers := signedHeaders
	if creds.SessionToken != "" {
		headers = signedHeadersWithToken
	}

	b := append(scratch[:0], "POST\n"...)
	b = append(b, path...)
	b = append(b, "\n\n"...)
	b = strconv.AppendInt(append(b, "content-length:"...), contentLength, 10)
	b = append(b, '\n')
	b = appendHeader(b, "content-type", contentType)
	b = append(append(append(b, "host:"...), s.host...), '\n')
	b = append(append(append(b, "x-amz-date:"...), amzDate...), '\n')
	if creds.SessionToken != "" {
		b = append(append(append(b, "x-amz-security-token:"...), creds.SessionToken...), '\n')
	}
	b = appendHeader(b, "x-amz-target", target)
	b = append(append(append(b, '\n'), headers...), '\n')
	b = append(b, payloadHash...)
	canonical := sha256.Sum256(b)

	b = append(b[:0], "AWS4-HMAC-SHA256\n"...)
	b = append(append(b, amzDate...), '\n')
	scopeAt := len(b)
	b = append(append(append(append(append(b, date...), '/'), s.region...), '/'), s.service...)
	b = append(b, "/aws4_request"...)
	scopeEnd := len(b)
	b = append(b, '\n')
	b = appendHex(b, canonical[:])

	key := s.keyFor(creds.SecretAccessKey, date)
	mac := key.mac()
	mac.Write(b)
	var sum [sha256.Size]byte
	signature := mac.Sum(sum[:0])
	key.put(mac)

	auth = make([]byte, 0, 64+len(creds.AccessKeyID)+scopeEnd-scopeAt+len(headers)+2*sha256.Size)
	auth = append(auth, "AWS4-HMAC-SHA256 Credential="...)
	auth = append(append(auth, creds.AccessKeyID...), '/')
	auth = append(auth, b[scopeAt:scopeEnd]...)
	auth = append(append(auth, ", SignedHeaders="...), headers...)
	auth = append(auth, ", Signature="...)
	auth = appendHex(auth, signature)
	return amzDate, auth, b
}

func appendHeader(b []byte, name string, values []string) []byte {
	b = append(append(b, name...), ':')
	for i, v := range values {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, v...)
	}
	return append(b, '\n')
}

func appendHex(b, v []byte) []byte {
	for _, c := range v {
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return b
}

// keyFor is the signing key of secret on date (YYYYMMDD), derived once a
// day (and again when the credentials rotate).
func (s *signer) keyFor(secret, date string) *signingKey {
	if k := s.key.Load(); k != nil && k.date == date && k.secret == secret {
		return k
	}
	key := hmacOf([]byte("AWS4"+secret), date)
	key = hmacOf(key, s.region)
	key = hmacOf(key, s.service)
	key = hmacOf(key, "aws4_request")
	k := &signingKey{secret: secret, date: date, key: key}
	s.key.Store(k)
	return k
}

func hmacOf(key []byte, data string) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(data))
	return mac.Sum(nil)
}
