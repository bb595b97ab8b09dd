package ddbwire_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/pointledger/pointledger/internal/ddbwire"
)

// authorization is a SigV4 Authorization header's parts.
type authorization struct {
	scope, signedHeaders, signature string
}

func parseAuthorization(t *testing.T, h string) authorization {
	t.Helper()
	rest, ok := strings.CutPrefix(h, "AWS4-HMAC-SHA256 ")
	if !ok {
		t.Fatalf("Authorization %q: not SigV4", h)
	}
	var a authorization
	for part := range strings.SplitSeq(rest, ", ") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "Credential":
			a.scope = v
		case "SignedHeaders":
			a.signedHeaders = v
		case "Signature":
			a.signature = v
		}
	}
	return a
}

// verify checks a request's signature as a server would: the request as it
// was sent (its signed headers, its body as received, the time in its
// X-Amz-Date) signed again with the SDK's signer must give its signature.
func verify(t *testing.T, sent *http.Request, body []byte, creds aws.Credentials) bool {
	t.Helper()
	a := parseAuthorization(t, sent.Header.Get("Authorization"))
	at, err := time.Parse("20060102T150405Z", sent.Header.Get("X-Amz-Date"))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(sent.URL.String())
	again := &http.Request{Method: sent.Method, URL: u, Host: sent.Host, Header: http.Header{}, ContentLength: int64(len(body))}
	for name := range strings.SplitSeq(a.signedHeaders, ";") {
		switch name {
		case "host", "content-length", "x-amz-date", "x-amz-security-token":
			continue // from the request's fields and the signing itself
		}
		again.Header[http.CanonicalHeaderKey(name)] = sent.Header.Values(name)
	}
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), "dynamodb", "eu-west-1", at); err != nil {
		t.Fatal(err)
	}
	b := parseAuthorization(t, again.Header.Get("Authorization"))
	return b.signature == a.signature && b.signedHeaders == a.signedHeaders && b.scope == a.scope
}

// TestSignatureMatchesSDK signs the same request both ways: the SDK
// client's request and ddbwire's, each captured as sent, are both accepted
// by a server's check of SigV4 (with and without a session token), with
// the same credential scope; and the check refuses a body changed after
// signing, so it can fail.
func TestSignatureMatchesSDK(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", "SESSION-TOKEN"} {
		t.Run("token "+token, func(t *testing.T) {
			t.Parallel()
			creds := aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "SECRET", SessionToken: token}
			provider := credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, token)
			in := transactionOf(attributeKinds[1].value)

			rec := &recorder{answer: "{}"}
			db := sdkClient("http://127.0.0.1:1", rec, provider)
			if _, err := db.TransactWriteItems(context.Background(), in); err != nil {
				t.Fatal(err)
			}
			sdkReq, sdkBody := rec.last(t)
			wire, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: rec})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := wire.TransactWriteItems(context.Background(), in); err != nil {
				t.Fatal(err)
			}
			req, body := rec.last(t)

			if !verify(t, sdkReq, sdkBody, creds) {
				t.Error("the check refuses the SDK's own signature")
			}
			if !verify(t, req, body, creds) {
				t.Errorf("ddbwire's signature is refused: %s", req.Header.Get("Authorization"))
			}
			if verify(t, req, append([]byte(" "), body...), creds) {
				t.Error("a body changed after signing passes the check")
			}
			got, want := parseAuthorization(t, req.Header.Get("Authorization")), parseAuthorization(t, sdkReq.Header.Get("Authorization"))
			if got.scope[strings.Index(got.scope, "/"):] != want.scope[strings.Index(want.scope, "/"):] || got.scope[:4] != "AKID" {
				t.Errorf("credential scope %q, the SDK's %q", got.scope, want.scope)
			}
			for _, h := range []string{"content-type", "host", "x-amz-date", "x-amz-target"} {
				if !strings.Contains(";"+got.signedHeaders+";", ";"+h+";") {
					t.Errorf("%s is not signed: %s", h, got.signedHeaders)
				}
			}
			if req.Header.Get("X-Amz-Security-Token") != token {
				t.Errorf("X-Amz-Security-Token %q, want %q", req.Header.Get("X-Amz-Security-Token"), token)
			}
			if req.URL.Host != sdkReq.URL.Host || req.URL.Path != sdkReq.URL.Path {
				t.Errorf("sent to %s, the SDK to %s", req.URL, sdkReq.URL)
			}
		})
	}
}
