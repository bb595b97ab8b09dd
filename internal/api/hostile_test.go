package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger/memory"
)

// A hostile request is a raw HTTP request, built by hand so that it can be
// anything a client could send, not only what a generated client would.
type hostileRequest struct {
	name   string
	method string // default POST
	path   string // default /pointledger.v1.LedgerService/Purchase
	header http.Header
	body   []byte

	code   connect.Code // the Connect code it must get; codeOK: it must succeed
	reason string       // the ErrorInfo reason it must carry, if not ""
	status int          // the HTTP status it must get, if not 0 (for answers outside the protocol)
	answer string       // with codeOK: "field=value" or "field" the JSON answer must hold
}

// codeOK: the request must succeed (a replay, a read of a look-alike user);
// it still must not write.
const codeOK connect.Code = 0

const (
	purchasePath = "/pointledger.v1.LedgerService/Purchase"
	grantPath    = "/pointledger.v1.LedgerService/Grant"
	refundPath   = "/pointledger.v1.LedgerService/Refund"
	balancePath  = "/pointledger.v1.LedgerService/GetBalance"
	entriesPath  = "/pointledger.v1.LedgerService/ListEntries"
	historyPath  = "/pointledger.v1.LedgerService/ListHistory"
)

// The seed: what the ledger holds before the corpus runs.
const (
	seedUser     = "alice"
	seedOther    = "bob"
	seedPurchase = "purchase-1"
	seedGrant    = "grant-1"
	seedRefund   = "refund-1"
)

// purchaseJSON is a Purchase body for alice that would be refused only for
// the given field, set raw (a JSON value as written, not a Go value).
func purchaseJSON(field, raw string) []byte { return purchaseJSONAs("hostile", field, raw) }

// purchaseJSONAs is purchaseJSON with its own request_id: a business
// refusal is recorded under its request_id, so each needs one.
func purchaseJSONAs(requestID, field, raw string) []byte {
	fields := map[string]string{"user_id": `"alice"`, "amount": `"1"`, "request_id": q(requestID)}
	fields[field] = raw
	return rawObject(fields)
}

// isBusinessRefusal says whether code is a refusal the ledger records under
// the request's request_id (ledger.Kind.Final).
func isBusinessRefusal(code connect.Code) bool {
	return code == connect.CodeFailedPrecondition || code == connect.CodeNotFound
}

// rawObject writes fields as a JSON object, values as written; a field with
// the value "" is left out.
func rawObject(fields map[string]string) []byte {
	keys := slices.Sorted(maps.Keys(fields))
	var b bytes.Buffer
	b.WriteByte('{')
	for _, k := range keys {
		if fields[k] == "" {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", k, fields[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// q quotes s as a JSON string, escaping what JSON must (so "\u202e" stays
// the character itself).
func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pageTokens are the next-page tokens of alice's first pages of one item.
type pageTokens struct {
	entries                  string // ListEntries
	newestFirst, oldestFirst string // ListHistory
}

// alterToken changes one base64url digit in the middle of token.
func alterToken(token string) string {
	b := []byte(token)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// hostileCorpus is every malformed or hostile request without credentials
// problems; each must get its code and write nothing, but for a business
// refusal (not_found, failed_precondition) its refusal record. Cases about
// credentials and roles belong in a corpus of the same form, run by the same
// test. tokens are page tokens the service gave for alice.
func hostileCorpus(tokens pageTokens) []hostileRequest {
	return slices.Concat(
		wrongTypeCorpus(),
		brokenJSONCorpus(),
		missingFieldCorpus(),
		hugeCorpus(),
		unicodeCorpus(),
		keyInjectionCorpus(),
		amountCorpus(),
		refundCorpus(),
		reusedRequestIDCorpus(),
		pageTokenCorpus(tokens),
		protocolCorpus(),
		wireCorpus(),
	)
}

// TestHostileRequestsWriteNothing seeds a ledger, sends every request of the
// corpus, and checks each got its code, and that the store and the history
// hold exactly the seed afterwards, record for record, and a refusal record
// for each business refusal (a refused request_id stays refused).
func TestHostileRequestsWriteNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	s.grant(t, seedUser, seedGrant, "100")
	if _, err := s.client.Purchase(context.Background(), connect.NewRequest(&pb.PurchaseRequest{
		UserId: seedUser, RequestId: seedPurchase, Amount: "30", OrderId: "order-42",
	})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.refund(seedUser, seedRefund, seedPurchase, "5"); err != nil {
		t.Fatal(err)
	}
	s.grant(t, seedOther, "bob-grant", "50")
	// The history, as the projector would have it, for ListHistory's cases.
	ctx := context.Background()
	for _, u := range []string{seedUser, seedOther} {
		if err := s.srv.History.Rebuild(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := s.client.ListEntries(ctx, connect.NewRequest(&pb.ListEntriesRequest{UserId: seedUser, PageSize: 1}))
	if err != nil || entries.Msg.NextPageToken == "" {
		t.Fatalf("an entries page token: %v, %v", entries, err)
	}
	tokens := pageTokens{entries: entries.Msg.NextPageToken}
	for _, oldestFirst := range []bool{false, true} {
		res, err := s.client.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{UserId: seedUser, PageSize: 1, OldestFirst: oldestFirst}))
		if err != nil || res.Msg.NextPageToken == "" {
			t.Fatalf("a history page token: %v, %v", res, err)
		}
		if oldestFirst {
			tokens.oldestFirst = res.Msg.NextPageToken
		} else {
			tokens.newestFirst = res.Msg.NextPageToken
		}
	}
	before := s.srv.Snapshot()

	corpus := hostileCorpus(tokens)
	if len(corpus) < 50 {
		t.Errorf("the corpus has %d cases, want at least 50", len(corpus))
	}
	names := map[string]bool{}
	for _, c := range corpus {
		if names[c.name] {
			t.Errorf("two cases are named %q", c.name)
		}
		names[c.name] = true
		t.Run(c.name, func(t *testing.T) {
			code, why, httpStatus, answer := s.send(t, c)
			if code != c.code {
				t.Errorf("code = %v (HTTP %d, reason %q), want %v", codeName(code), httpStatus, why, codeName(c.code))
			}
			if c.reason != "" && why != c.reason {
				t.Errorf("reason = %q, want %q", why, c.reason)
			}
			if c.answer != "" && !holds(answer, c.answer) {
				t.Errorf("answer %s does not hold %s", answer, c.answer)
			}
			if c.status != 0 && httpStatus != c.status {
				t.Errorf("HTTP status = %d, want %d", httpStatus, c.status)
			}
			if httpStatus == http.StatusInternalServerError || code == connect.CodeInternal && c.code != connect.CodeInternal {
				t.Errorf("the server failed on it: HTTP %d, %v", httpStatus, code)
			}
		})
	}
	after := s.srv.Snapshot()
	added, changed, removed := before.Diff(after)
	refusals := 0
	for _, key := range added {
		if strings.HasPrefix(key, `ledger "`) && strings.Contains(key, `" request "`) && strings.HasPrefix(after[key], memory.RefusalPrefix) {
			refusals++
			continue
		}
		t.Errorf("written: %s = %s", key, after[key])
	}
	for _, key := range changed {
		t.Errorf("changed: %s\n was %s\n now %s", key, before[key], after[key])
	}
	for _, key := range removed {
		t.Errorf("deleted: %s", key)
	}
	wantRefusals := 0
	for _, c := range corpus {
		// A read refused (ListHistory's min_version past the ledger) has
		// no request_id, and records nothing.
		if isBusinessRefusal(c.code) && !slices.Contains([]string{balancePath, entriesPath, historyPath}, c.path) {
			wantRefusals++
		}
	}
	if refusals != wantRefusals {
		t.Errorf("%d refusal records written, want %d: one for each business refusal", refusals, wantRefusals)
	}
	if len(before) != 16 { // 4 entries, 4 request records, 2 accounts, 4 history items, 2 history states
		t.Errorf("the seed is %d records, want 16; the snapshot does not see them all", len(before))
	}
	s.assertSound(t, seedUser)
	s.assertSound(t, seedOther)
}

// holds says whether the JSON object answer has the top-level field
// "field=value" (the value as fmt prints it) or, without "=", the field.
func holds(answer, want string) bool {
	var m map[string]any
	if json.Unmarshal([]byte(answer), &m) != nil {
		return false
	}
	field, value, hasValue := strings.Cut(want, "=")
	got, ok := m[field]
	return ok && (!hasValue || fmt.Sprint(got) == value)
}

func codeName(c connect.Code) string {
	if c == codeOK {
		return "ok"
	}
	return c.String()
}

// send sends c and returns the Connect code of the answer (codeOK for a
// success), its ErrorInfo reason, the HTTP status and the answer's body.
// The server's credentials, once it wants some, go here too; a case's own
// header replaces them.
func (s *testServer) send(tb testing.TB, c hostileRequest) (code connect.Code, reason string, httpStatus int, answer string) {
	tb.Helper()
	method, path := c.method, c.path
	if method == "" {
		method = http.MethodPost
	}
	if path == "" {
		path = purchasePath
	}
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(c.body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range c.header {
		req.Header[k] = v
	}
	res, err := s.http.Do(req)
	if err != nil {
		tb.Fatalf("send: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatalf("read the answer: %v", err)
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/grpc-web") {
		code, why := grpcWebStatus(tb, res, body)
		return code, why, res.StatusCode, string(body)
	}
	if res.StatusCode == http.StatusOK {
		return codeOK, "", res.StatusCode, string(body)
	}
	// A Connect unary error: a JSON body with the code and the details.
	var wire struct {
		Code    string `json:"code"`
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	}
	if err := json.Unmarshal(body, &wire); err != nil || wire.Code == "" {
		// No Connect error body: the protocol's mapping of the HTTP status.
		return httpToCode(res.StatusCode), "", res.StatusCode, string(body)
	}
	if err := code.UnmarshalText([]byte(wire.Code)); err != nil {
		tb.Fatalf("answer %s: %v", body, err)
	}
	for _, d := range wire.Details {
		if d.Type != "google.rpc.ErrorInfo" {
			continue
		}
		var info errdetails.ErrorInfo
		raw, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil || proto.Unmarshal(raw, &info) != nil {
			tb.Fatalf("detail %q does not decode", d.Value)
		}
		return code, info.Reason, res.StatusCode, string(body)
	}
	return code, "", res.StatusCode, string(body)
}

// httpToCode is the Connect protocol's code for an HTTP status without a
// Connect error body.
func httpToCode(status int) connect.Code {
	switch status {
	case http.StatusBadRequest:
		return connect.CodeInternal
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeUnimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return connect.CodeUnavailable
	}
	return connect.CodeUnknown
}

// grpcWebStatus reads grpc-status and its details from the headers (a
// trailers-only answer) or from the trailer frame of the body.
func grpcWebStatus(tb testing.TB, res *http.Response, body []byte) (connect.Code, string) {
	tb.Helper()
	trailer := res.Header
	if trailer.Get("Grpc-Status") == "" {
		trailer = http.Header{}
		for len(body) >= 5 {
			flags, n := body[0], binary.BigEndian.Uint32(body[1:5])
			if uint32(len(body)-5) < n {
				tb.Fatalf("grpc-web answer: truncated frame")
			}
			frame := body[5 : 5+n]
			body = body[5+n:]
			if flags&0x80 == 0 {
				continue
			}
			for line := range strings.SplitSeq(string(frame), "\r\n") {
				if k, v, ok := strings.Cut(line, ":"); ok {
					trailer.Add(strings.TrimSpace(k), strings.TrimSpace(v))
				}
			}
		}
	}
	n, err := strconv.Atoi(trailer.Get("Grpc-Status"))
	if err != nil {
		tb.Fatalf("grpc-web answer without grpc-status: %v", err)
	}
	raw := trailer.Get("Grpc-Status-Details-Bin")
	if raw == "" {
		return connect.Code(n), ""
	}
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(raw, "="))
	var st status.Status
	if err != nil || proto.Unmarshal(b, &st) != nil {
		tb.Fatalf("grpc-status-details-bin %q does not decode", raw)
	}
	for _, d := range st.Details {
		var info errdetails.ErrorInfo
		if anypb.UnmarshalTo(d, &info, proto.UnmarshalOptions{}) == nil {
			return connect.Code(n), info.Reason
		}
	}
	return connect.Code(n), ""
}
