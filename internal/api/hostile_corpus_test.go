package api_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/ledger"
)

// amountCase is a Purchase refused for its amount, set raw.
func amountCase(name, raw, reason string) hostileRequest {
	return hostileRequest{name: "amount " + name, body: purchaseJSON("amount", raw), code: connect.CodeInvalidArgument, reason: reason}
}

// userCase is a Purchase refused for its user_id.
func userCase(name, id string) hostileRequest {
	return hostileRequest{name: "user_id " + name, body: purchaseJSON("user_id", q(id)), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID}
}

// requestIDCase is a Purchase refused for its request_id.
func requestIDCase(name, id string) hostileRequest {
	return hostileRequest{name: "request_id " + name, body: purchaseJSON("request_id", q(id)), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidRequestID}
}

// invalidJSON is a Purchase whose body is not the JSON of a request.
func invalidJSON(name string, body string) hostileRequest {
	return hostileRequest{name: name, body: []byte(body), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest}
}

// refundCase is a refund of the seed purchase with fields changed, that
// must get code and reason.
func refundCase(name string, fields map[string]string, code connect.Code, reason string) hostileRequest {
	all := map[string]string{"user_id": `"alice"`, "amount": `"1"`, "request_id": `"hostile-refund"`, "purchase_request_id": q(seedPurchase)}
	if isBusinessRefusal(code) { // recorded under its request_id: one of its own
		all["request_id"] = q("hostile-refund-" + strings.Join(strings.FieldsFunc(name, func(r rune) bool { return r == ' ' || r == '\'' }), "-"))
	}
	for k, v := range fields {
		all[k] = v
	}
	return hostileRequest{name: "refund " + name, path: refundPath, body: rawObject(all), code: code, reason: reason}
}

// wrongTypeCorpus is the requests whose fields have the wrong JSON type, or a
// number out of its range.
func wrongTypeCorpus() []hostileRequest {
	return []hostileRequest{
		invalidJSON("amount as a number", `{"user_id":"alice","amount":10,"request_id":"hostile"}`),
		invalidJSON("amount as a bool", `{"user_id":"alice","amount":true,"request_id":"hostile"}`),
		invalidJSON("amount as an object", `{"user_id":"alice","amount":{"value":"1"},"request_id":"hostile"}`),
		invalidJSON("user_id as a number", `{"user_id":123,"amount":"1","request_id":"hostile"}`),
		invalidJSON("user_id as an array", `{"user_id":["alice"],"amount":"1","request_id":"hostile"}`),
		invalidJSON("metadata as a string", `{"user_id":"alice","amount":"1","request_id":"hostile","metadata":"shop"}`),
		invalidJSON("metadata value as a number", `{"user_id":"alice","amount":"1","request_id":"hostile","metadata":{"shop":1}}`),
		invalidJSON("body is an array", `[{"user_id":"alice","amount":"1","request_id":"hostile"}]`),
		invalidJSON("body is a string", `"alice"`),
		{name: "page_size as a string of letters", path: entriesPath, body: []byte(`{"user_id":"alice","page_size":"many"}`), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "page_size as a fraction", path: entriesPath, body: []byte(`{"user_id":"alice","page_size":1.5}`), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "page_size beyond int32", path: entriesPath, body: []byte(`{"user_id":"alice","page_size":4294967296}`), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "page_size at int32 max is capped", path: entriesPath, body: []byte(`{"user_id":"alice","page_size":2147483647}`), code: codeOK, answer: "entries"},
		{name: "history page_size at int32 max is capped", path: historyPath, body: []byte(`{"user_id":"alice","page_size":2147483647}`), code: codeOK, answer: "items"},
		{name: "history page_size negative", path: historyPath, body: []byte(`{"user_id":"alice","page_size":-1}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageSize},
		{name: "page_size negative", path: entriesPath, body: []byte(`{"user_id":"alice","page_size":-1}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageSize},
		{name: "types an unknown name", path: historyPath, body: []byte(`{"user_id":"alice","types":["ENTRY_TYPE_THEFT"]}`), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "start_time in year 10000", path: historyPath, body: []byte(`{"user_id":"alice","start_time":"10000-01-01T00:00:00Z"}`), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "start_time not a time", path: historyPath, body: []byte(`{"user_id":"alice","start_time":"yesterday"}`), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "types an unknown number", path: historyPath, body: []byte(`{"user_id":"alice","types":[99]}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidFilter},
		{name: "min_version negative", path: historyPath, body: []byte(`{"user_id":"alice","min_version":-1}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidMinVersion},
		{name: "min_version at int64 max", path: historyPath, body: []byte(`{"user_id":"alice","min_version":"9223372036854775807"}`), code: connect.CodeFailedPrecondition, reason: ledger.ReasonMinVersionAhead},
		{name: "min_version beyond int64", path: historyPath, body: []byte(`{"user_id":"alice","min_version":"9223372036854775808"}`), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "min_version as a fraction", path: historyPath, body: []byte(`{"user_id":"alice","min_version":1.5}`), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "min_version of another user's ledger", path: historyPath, body: []byte(`{"user_id":"nobody","min_version":1}`), code: connect.CodeFailedPrecondition, reason: ledger.ReasonMinVersionAhead},
		{name: "min_version with a bad user id", path: historyPath, body: []byte(`{"user_id":"alice#A","min_version":1}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "min_version reached", path: historyPath, body: []byte(`{"user_id":"alice","min_version":1}`), code: codeOK, answer: "items"},
	}
}

// brokenJSONCorpus is the requests whose body is not the JSON of a request:
// unknown fields, duplicate keys, broken syntax.
func brokenJSONCorpus() []hostileRequest {
	return []hostileRequest{
		invalidJSON("unknown field", `{"user_id":"alice","amount":"1","request_id":"hostile","admin":true}`),
		invalidJSON("unknown field balance", `{"user_id":"alice","amount":"1","request_id":"hostile","balance":"1000000"}`),
		invalidJSON("duplicate user_id", `{"user_id":"bob","amount":"1","request_id":"hostile","user_id":"alice"}`),
		invalidJSON("duplicate amount", `{"user_id":"alice","amount":"1","request_id":"hostile","amount":"-1000"}`),
		invalidJSON("same field by both names", `{"user_id":"alice","userId":"bob","amount":"1","request_id":"hostile"}`),
		invalidJSON("truncated", `{"user_id":"alice","amount":"1","request_id":"host`),
		invalidJSON("trailing garbage", `{"user_id":"alice","amount":"1","request_id":"hostile"}{}`),
		invalidJSON("empty body", ``),
		invalidJSON("null body", `null`),
		invalidJSON("single quotes", `{'user_id':'alice','amount':'1','request_id':'hostile'}`),
		invalidJSON("invalid UTF-8 in a string", "{\"user_id\":\"al\xffice\",\"amount\":\"1\",\"request_id\":\"hostile\"}"),
		invalidJSON("byte order mark", "\ufeff"+`{"user_id":"alice","amount":"1","request_id":"hostile"}`),
		invalidJSON("deeply nested", `{"user_id":"alice","amount":"1","request_id":"hostile","metadata":{"k":`+strings.Repeat("[", 50000)+`}}`),
		invalidJSON("lone surrogate escape", `{"user_id":"alice\ud800","amount":"1","request_id":"hostile"}`),
	}
}

// missingFieldCorpus is the requests without a field they need.
func missingFieldCorpus() []hostileRequest {
	return []hostileRequest{
		{name: "empty object", body: []byte(`{}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "no user_id", body: purchaseJSON("user_id", ""), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "user_id null", body: purchaseJSON("user_id", "null"), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "no request_id", body: purchaseJSON("request_id", ""), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidRequestID},
		{name: "no amount", body: purchaseJSON("amount", ""), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidAmount},
		refundCase("without purchase_request_id", map[string]string{"purchase_request_id": ""}, connect.CodeInvalidArgument, ledger.ReasonInvalidRequestID),
		{name: "balance without user_id", path: balancePath, body: []byte(`{}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "entries without user_id", path: entriesPath, body: []byte(`{}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "history without user_id", path: historyPath, body: []byte(`{}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
	}
}

// hugeCorpus is the requests with huge strings, within and beyond the size
// limit.
func hugeCorpus() []hostileRequest {
	over := strings.Repeat("x", api.MaxRequestBytes)
	return []hostileRequest{
		userCase("of 60000 characters", strings.Repeat("a", 60000)),
		{name: "order_id of 257 bytes", body: purchaseJSON("order_id", q(strings.Repeat("o", ledger.MaxOrderIDBytes+1))), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidOrderID},
		{name: "metadata over 2048 bytes in all", body: purchaseJSON("metadata", string(must(json.Marshal(bigMetadata())))), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidMetadata},
		{name: "metadata key of 65 bytes", body: purchaseJSON("metadata", `{`+q(strings.Repeat("k", ledger.MaxMetadataKey+1))+`:"v"}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidMetadata},
		{name: "metadata of 17 keys", body: purchaseJSON("metadata", string(must(json.Marshal(manyKeys(ledger.MaxMetadataKeys+1))))), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidMetadata},
		{name: "metadata value of 10000 bytes", body: purchaseJSON("metadata", `{"shop":`+q(strings.Repeat("v", 10000))+`}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidMetadata},
		{name: "body over 64 KiB", body: purchaseJSON("order_id", q(over)), code: connect.CodeResourceExhausted},
		{name: "gzip body inflating over 64 KiB", header: http.Header{"Content-Encoding": {"gzip"}}, body: gzipped(purchaseJSON("order_id", q(over+over))), code: connect.CodeResourceExhausted},
		{name: "gzip announced, not gzip", header: http.Header{"Content-Encoding": {"gzip"}}, body: purchaseJSON("amount", `"1"`), code: connect.CodeInvalidArgument},
		{name: "header of 2 MiB", header: http.Header{"X-Filler": {strings.Repeat("h", 2<<20)}}, body: purchaseJSON("amount", `"1"`), code: connect.CodeUnknown, status: http.StatusRequestHeaderFieldsTooLarge},
		{name: "unsupported content encoding", header: http.Header{"Content-Encoding": {"br"}}, body: purchaseJSON("amount", `"1"`), code: connect.CodeUnimplemented},
	}
}

// unicodeCorpus is the requests with Unicode tricks in ids and amounts.
func unicodeCorpus() []hostileRequest {
	return []hostileRequest{
		userCase("with an RTL override", "\u202eecila"),
		userCase("with a zero-width joiner", "ali\u200dce"),
		userCase("with a NUL", "alice\u0000"),
		userCase("with a Cyrillic a", "аlice"),
		userCase("in full-width letters", "ａｌｉｃｅ"),
		userCase("with a combining accent", "alice\u0301"),
		amountCase("in full-width digits", q("１０"), ledger.ReasonInvalidAmount),
		amountCase("in Arabic-Indic digits", q("١٠"), ledger.ReasonInvalidAmount),
		amountCase("with a zero-width space", q("1\u200b"), ledger.ReasonInvalidAmount),
		{name: "order_id with an RTL override", body: purchaseJSON("order_id", q("order-\u202e24")), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidOrderID},
		{name: "metadata value with a NUL", body: purchaseJSON("metadata", `{"shop":"ber\u0000lin"}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidMetadata},
	}
}

// keyInjectionCorpus is the requests with ids that would alter DynamoDB keys.
func keyInjectionCorpus() []hostileRequest {
	return []hostileRequest{
		userCase("#", "#"),
		userCase("ACCT#alice", "ACCT#alice"),
		userCase("alice#E#00000000000000000001", "alice#E#00000000000000000001"),
		userCase("with a newline", "alice\nbob"),
		userCase("with a tab", "alice\t"),
		userCase("with a space", "alice bob"),
		userCase("of 129 characters", strings.Repeat("a", ledger.MaxIDLength+1)),
		requestIDCase("E#00000000000000000001", "E#00000000000000000001"),
		requestIDCase("R#purchase-1", "R#purchase-1"),
		requestIDCase("with a newline", "hostile\n"),
		requestIDCase("of 129 characters", strings.Repeat("r", ledger.MaxIDLength+1)),
		{name: "metadata key #", body: purchaseJSON("metadata", `{"#":"x"}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidMetadata},
		refundCase("of purchase R#purchase-1", map[string]string{"purchase_request_id": q("R#" + seedPurchase)}, connect.CodeInvalidArgument, ledger.ReasonInvalidRequestID),
		{name: "balance of ACCT#alice", path: balancePath, body: []byte(`{"user_id":"ACCT#alice"}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "entries of alice#", path: entriesPath, body: []byte(`{"user_id":"alice#"}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		// "A" is the aggregate's sort key, but as a user id it is just a user
		// without points: the purchase is refused, the read shows nothing.
		{name: "user_id A", body: purchaseJSONAs("hostile-user-A", "user_id", `"A"`), code: connect.CodeFailedPrecondition, reason: ledger.ReasonInsufficientBalance},
		{name: "balance of A", path: balancePath, body: []byte(`{"user_id":"A"}`), code: codeOK, answer: "balance=0"},
		{name: "balance of ALICE is not alice's", path: balancePath, body: []byte(`{"user_id":"ALICE"}`), code: codeOK, answer: "balance=0"},
		{name: "user_id with an escaped #", body: []byte(`{"user_id":"alice\u0023E","amount":"1","request_id":"hostile"}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "request_id an escaped NUL", body: []byte(`{"user_id":"alice","amount":"1","request_id":"\u0000"}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidRequestID},
	}
}

// amountCorpus is the requests with amounts at every boundary.
func amountCorpus() []hostileRequest {
	return []hostileRequest{
		amountCase("0", `"0"`, ledger.ReasonInvalidAmount),
		amountCase("0.00", `"0.00"`, ledger.ReasonInvalidAmount),
		amountCase("-1", `"-1"`, ledger.ReasonInvalidAmount),
		amountCase("0.001 at scale 2", `"0.001"`, ledger.ReasonInvalidAmount),
		amountCase("just above the maximum", `"1000000000000000000"`, ledger.ReasonInvalidAmount),
		amountCase("1e3", `"1e3"`, ledger.ReasonInvalidAmount),
		amountCase("1E-2", `"1E-2"`, ledger.ReasonInvalidAmount),
		amountCase("NaN", `"NaN"`, ledger.ReasonInvalidAmount),
		amountCase("Infinity", `"Infinity"`, ledger.ReasonInvalidAmount),
		amountCase("empty", `""`, ledger.ReasonInvalidAmount),
		amountCase("leading space", `" 1"`, ledger.ReasonInvalidAmount),
		amountCase("trailing space", `"1 "`, ledger.ReasonInvalidAmount),
		amountCase("+1", `"+1"`, ledger.ReasonInvalidAmount),
		amountCase("0x10", `"0x10"`, ledger.ReasonInvalidAmount),
		amountCase("of 1000 digits", q(strings.Repeat("9", 1000)), ledger.ReasonInvalidAmount),
		amountCase("1,5", `"1,5"`, ledger.ReasonInvalidAmount),
		amountCase("1.000 at scale 2", `"1.000"`, ledger.ReasonInvalidAmount),
		amountCase("with a Unicode minus", q("−1"), ledger.ReasonInvalidAmount),
		amountCase("19 integer digits after leading zeros", `"0001000000000000000000"`, ledger.ReasonInvalidAmount),
		{name: "amount at the maximum, not covered", body: purchaseJSONAs("hostile-maximum", "amount", `"999999999999999999.99"`), code: connect.CodeFailedPrecondition, reason: ledger.ReasonInsufficientBalance},
		{name: "amount just above the balance", body: purchaseJSONAs("hostile-above-balance", "amount", `"75.01"`), code: connect.CodeFailedPrecondition, reason: ledger.ReasonInsufficientBalance},
		{name: "grant of 0.001", path: grantPath, body: purchaseJSON("amount", `"0.001"`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidAmount},
		{name: "grant of -100", path: grantPath, body: purchaseJSON("amount", `"-100"`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidAmount},
	}
}

// refundCorpus is the refunds that must not pay out.
func refundCorpus() []hostileRequest {
	return []hostileRequest{
		refundCase("of a purchase that does not exist", map[string]string{"purchase_request_id": `"no-such-purchase"`}, connect.CodeNotFound, ledger.ReasonPurchaseNotFound),
		refundCase("of another user's purchase", map[string]string{"user_id": q(seedOther)}, connect.CodeNotFound, ledger.ReasonPurchaseNotFound),
		refundCase("of a grant", map[string]string{"purchase_request_id": q(seedGrant)}, connect.CodeNotFound, ledger.ReasonPurchaseNotFound),
		refundCase("of more than the purchase", map[string]string{"amount": `"30.01"`}, connect.CodeFailedPrecondition, ledger.ReasonRefundExceedsPurchase),
		refundCase("of 0.001", map[string]string{"amount": `"0.001"`}, connect.CodeInvalidArgument, ledger.ReasonInvalidAmount),
		refundCase("of a refund", map[string]string{"purchase_request_id": q(seedRefund)}, connect.CodeNotFound, ledger.ReasonPurchaseNotFound),
		refundCase("of the rest and a bit", map[string]string{"amount": `"25.01"`}, connect.CodeFailedPrecondition, ledger.ReasonRefundExceedsPurchase),
		refundCase("request_id reused with another amount", map[string]string{"request_id": q(seedRefund), "amount": `"4"`}, connect.CodeAlreadyExists, ledger.ReasonRequestIDReused),
		refundCase("of a negative amount", map[string]string{"amount": `"-30"`}, connect.CodeInvalidArgument, ledger.ReasonInvalidAmount),
		{name: "purchase naming a purchase to refund", body: purchaseJSON("purchase_request_id", q(seedPurchase)), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
	}
}

// reusedRequestIDCorpus is the requests whose request_id was used before.
func reusedRequestIDCorpus() []hostileRequest {
	return []hostileRequest{
		{name: "request_id reused with another amount", body: rawObject(map[string]string{"user_id": `"alice"`, "amount": `"31"`, "request_id": q(seedPurchase), "order_id": `"order-42"`}), code: connect.CodeAlreadyExists, reason: ledger.ReasonRequestIDReused},
		{name: "request_id reused with another order", body: rawObject(map[string]string{"user_id": `"alice"`, "amount": `"30"`, "request_id": q(seedPurchase), "order_id": `"order-43"`}), code: connect.CodeAlreadyExists, reason: ledger.ReasonRequestIDReused},
		{name: "purchase request_id reused by a grant", path: grantPath, body: rawObject(map[string]string{"user_id": `"alice"`, "amount": `"30"`, "request_id": q(seedPurchase), "order_id": `"order-42"`}), code: connect.CodeAlreadyExists, reason: ledger.ReasonRequestIDReused},
		{name: "grant request_id reused by a purchase", body: rawObject(map[string]string{"user_id": `"alice"`, "amount": `"100"`, "request_id": q(seedGrant)}), code: connect.CodeAlreadyExists, reason: ledger.ReasonRequestIDReused},
		{name: "replay of the seed purchase", body: rawObject(map[string]string{"user_id": `"alice"`, "amount": `"30"`, "request_id": q(seedPurchase), "order_id": `"order-42"`}), code: codeOK, answer: "replayed=true"},
		{name: "replay written with another amount notation", body: rawObject(map[string]string{"user_id": `"alice"`, "amount": `"30.00"`, "request_id": q(seedPurchase), "order_id": `"order-42"`}), code: codeOK, answer: "replayed=true"},
	}
}

// pageTokenCorpus is the requests with page tokens that are not this
// service's, or another user's; tokens are page tokens the service gave for
// alice.
func pageTokenCorpus(tokens pageTokens) []hostileRequest {
	return []hostileRequest{
		{name: "page_token garbage", path: entriesPath, body: []byte(`{"user_id":"alice","page_token":"%%%"}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "page_token the version prefix alone", path: entriesPath, body: []byte(`{"user_id":"alice","page_token":"v1."}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "page_token the service gave", path: entriesPath, body: []byte(`{"user_id":"alice","page_token":` + q(tokens.entries) + `}`), code: codeOK, answer: "entries"},
		{name: "page_token of another user", path: entriesPath, body: []byte(`{"user_id":"bob","page_token":` + q(tokens.entries) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "page_token altered", path: entriesPath, body: []byte(`{"user_id":"alice","page_token":` + q(alterToken(tokens.entries)) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "page_token of ListHistory", path: entriesPath, body: []byte(`{"user_id":"alice","page_token":` + q(tokens.newestFirst) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "page_token of the old format", path: entriesPath, body: []byte(`{"user_id":"alice","page_token":` + q(base64.RawURLEncoding.EncodeToString([]byte(`{"u":"alice","v":1}`))) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "page_token of the old format, another user's", path: entriesPath, body: []byte(`{"user_id":"alice","page_token":` + q(base64.RawURLEncoding.EncodeToString([]byte(`{"u":"bob","v":0}`))) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "page_token of the old format, at the largest version", path: entriesPath, body: []byte(`{"user_id":"alice","page_token":` + q(base64.RawURLEncoding.EncodeToString([]byte(`{"u":"alice","v":9223372036854775807}`))) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "page_token of the old format, negative", path: entriesPath, body: []byte(`{"user_id":"alice","page_token":` + q(base64.RawURLEncoding.EncodeToString([]byte(`{"u":"alice","v":-5}`))) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "history page_token the service gave", path: historyPath, body: []byte(`{"user_id":"alice","page_token":` + q(tokens.newestFirst) + `}`), code: codeOK, answer: "items"},
		{name: "history page_token of another filter", path: historyPath, body: []byte(`{"user_id":"alice","oldest_first":true,"page_token":` + q(tokens.newestFirst) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "history page_token of another user", path: historyPath, body: []byte(`{"user_id":"bob","oldest_first":true,"page_token":` + q(tokens.oldestFirst) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "history page_token altered", path: historyPath, body: []byte(`{"user_id":"alice","oldest_first":true,"page_token":` + q(alterToken(tokens.oldestFirst)) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "history page_token of ListEntries", path: historyPath, body: []byte(`{"user_id":"alice","oldest_first":true,"page_token":` + q(tokens.entries) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "history page_token of the old format", path: historyPath, body: []byte(`{"user_id":"alice","page_token":` + q(base64.RawURLEncoding.EncodeToString([]byte(`{"u":"alice","v":3,"f":"0123456789abcdef"}`))) + `}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidPageToken},
		{name: "history types repeated 200 times", path: historyPath, body: []byte(`{"user_id":"alice","types":[` + strings.TrimSuffix(strings.Repeat(`"ENTRY_TYPE_GRANT",`, 200), ",") + `]}`), code: codeOK, answer: "items"},
	}
}

// protocolCorpus is the requests that break the protocol itself.
func protocolCorpus() []hostileRequest {
	return []hostileRequest{
		{name: "GET", method: http.MethodGet, body: nil, code: connect.CodeInvalidArgument, reason: api.ReasonMethodNotAllowed, status: http.StatusMethodNotAllowed},
		{name: "PUT", method: http.MethodPut, body: purchaseJSON("amount", `"1"`), code: connect.CodeInvalidArgument, reason: api.ReasonMethodNotAllowed, status: http.StatusMethodNotAllowed},
		{name: "content type text/plain", header: http.Header{"Content-Type": {"text/plain"}}, body: purchaseJSON("amount", `"1"`), code: connect.CodeInvalidArgument, reason: api.ReasonUnsupportedMediaType, status: http.StatusUnsupportedMediaType},
		{name: "content type form", header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, body: []byte("user_id=alice&amount=1&request_id=hostile"), code: connect.CodeInvalidArgument, reason: api.ReasonUnsupportedMediaType, status: http.StatusUnsupportedMediaType},
		{name: "content type json in UTF-16", header: http.Header{"Content-Type": {"application/json; charset=utf-16"}}, body: purchaseJSON("amount", `"1"`), code: connect.CodeInvalidArgument, reason: api.ReasonUnsupportedMediaType, status: http.StatusUnsupportedMediaType},
		{name: "no content type", header: http.Header{"Content-Type": {""}}, body: purchaseJSON("amount", `"1"`), code: connect.CodeInvalidArgument, reason: api.ReasonUnsupportedMediaType, status: http.StatusUnsupportedMediaType},
		{name: "unknown procedure", path: "/pointledger.v1.LedgerService/Transfer", body: purchaseJSON("amount", `"1"`), code: connect.CodeUnimplemented, reason: api.ReasonUnknownProcedure, status: http.StatusNotFound},
		{name: "path traversal", path: "/pointledger.v1.LedgerService/../AdminService/Adjust", body: purchaseJSON("amount", `"1"`), code: connect.CodeUnimplemented, reason: api.ReasonUnknownProcedure, status: http.StatusNotFound},
		{name: "protocol version 2", header: http.Header{"Connect-Protocol-Version": {"2"}}, body: purchaseJSON("amount", `"1"`), code: connect.CodeInvalidArgument},
		{name: "timeout of 11 digits", header: http.Header{"Connect-Timeout-Ms": {"99999999999"}}, body: purchaseJSON("amount", `"1"`), code: connect.CodeInvalidArgument},
		{name: "GET of a procedure with side effects", method: http.MethodGet, path: purchasePath + "?encoding=json&message=" + url.QueryEscape(string(purchaseJSON("amount", `"1"`))), code: connect.CodeInvalidArgument, reason: api.ReasonMethodNotAllowed, status: http.StatusMethodNotAllowed},
		{name: "GET balance of ACCT#alice", method: http.MethodGet, path: balancePath + "?encoding=json&message=" + url.QueryEscape(`{"user_id":"ACCT#alice"}`), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "GET balance, no message", method: http.MethodGet, path: balancePath + "?encoding=json", code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "GET balance, no encoding", method: http.MethodGet, path: balancePath + "?message=%7B%7D", code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "GET balance, message not base64", method: http.MethodGet, path: balancePath + "?encoding=json&base64=1&message=!!!!", code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "GET balance, message in padded base64", method: http.MethodGet, path: balancePath + "?encoding=json&base64=1&message=" + base64.URLEncoding.EncodeToString([]byte(`{"user_id":"A"}`)), code: codeOK, answer: "balance=0"},
		{name: "GET balance, message not JSON", method: http.MethodGet, path: balancePath + "?encoding=json&message=%7Buser", code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "GET balance, unknown encoding", method: http.MethodGet, path: balancePath + "?encoding=xml&message=%3Cuser%2F%3E", code: connect.CodeInvalidArgument, reason: api.ReasonUnsupportedMediaType, status: http.StatusUnsupportedMediaType},
		{name: "timeout not a number", header: http.Header{"Connect-Timeout-Ms": {"soon"}}, body: purchaseJSON("amount", `"1"`), code: connect.CodeInvalidArgument},
	}
}

// wireCorpus is the requests in binary proto (Connect) and gRPC-Web.
func wireCorpus() []hostileRequest {
	return []hostileRequest{
		{name: "proto: garbage", header: protoHeader, body: []byte{0xff, 0xff, 0xff, 0xff}, code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "proto: invalid UTF-8 in user_id", header: protoHeader, body: purchaseWire("al\xffice", "1"), code: connect.CodeInvalidArgument, reason: api.ReasonMalformedRequest},
		{name: "proto: amount 1e3", header: protoHeader, body: purchaseWire("alice", "1e3"), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidAmount},
		{name: "proto: user_id ACCT#alice", header: protoHeader, body: purchaseWire("ACCT#alice", "1"), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "proto: user_id field as varint", header: protoHeader, body: protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7), code: connect.CodeInvalidArgument},
		{name: "grpc-web: key-injection user", header: grpcWebHeader, body: grpcWebFrame(0, purchaseWire("alice#A", "1")), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidUserID},
		{name: "grpc-web: amount NaN", header: grpcWebHeader, body: grpcWebFrame(0, purchaseWire("alice", "NaN")), code: connect.CodeInvalidArgument, reason: ledger.ReasonInvalidAmount},
		{name: "grpc-web: frame claims 1 GiB", header: grpcWebHeader, body: append(binary.BigEndian.AppendUint32([]byte{0}, 1<<30), purchaseWire("alice", "1")...), code: connect.CodeResourceExhausted},
		// connect-go calls a frame shorter than its prefix promised a
		// protocol error, INTERNAL, as gRPC does; nothing reaches the ledger.
		{name: "grpc-web: truncated frame", header: grpcWebHeader, body: append(binary.BigEndian.AppendUint32([]byte{0}, 100), purchaseWire("alice", "1")...), code: connect.CodeInternal},
		{name: "grpc-web: compressed flag without an encoding", header: grpcWebHeader, body: grpcWebFrame(1, purchaseWire("alice", "1")), code: connect.CodeInternal},
	}
}

var (
	protoHeader   = http.Header{"Content-Type": {"application/proto"}}
	grpcWebHeader = http.Header{"Content-Type": {"application/grpc-web+proto"}, "X-Grpc-Web": {"1"}}
)

// purchaseWire is a PurchaseRequest in the proto wire format, written field
// by field so that it may hold what proto.Marshal refuses (invalid UTF-8).
func purchaseWire(user, amount string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, user)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, amount)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendString(b, "hostile")
	return b
}

func grpcWebFrame(flags byte, msg []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{flags}, uint32(len(msg))), msg...)
}

func gzipped(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

// bigMetadata is 16 keys of 64 bytes with values of 256: each within its
// bound, together beyond the total.
func bigMetadata() map[string]string {
	m := map[string]string{}
	for i := range ledger.MaxMetadataKeys {
		m[fmt.Sprintf("%064d", i)] = strings.Repeat("v", ledger.MaxMetadataValue)
	}
	return m
}

func manyKeys(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprint("k", i)] = "v"
	}
	return m
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
