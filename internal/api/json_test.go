package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"testing"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
)

// postJSON calls procedure with a Connect/HTTP JSON body, as curl or a
// browser would, and returns the answer's JSON object as it was written.
func (s *testServer) postJSON(tb testing.TB, procedure, body string) map[string]any {
	tb.Helper()
	b := s.postJSONBytes(tb, procedure, body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		tb.Fatalf("%s answered %s: %v", procedure, b, err)
	}
	return out
}

// postJSONBytes is postJSON's answer as the bytes the server wrote.
func (s *testServer) postJSONBytes(tb testing.TB, procedure, body string) []byte {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+procedure, bytes.NewReader([]byte(body)))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := s.http.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		tb.Fatalf("%s %s: HTTP %d %s", procedure, body, res.StatusCode, b)
	}
	return b
}

// JSON answers are compact, byte for byte what the README shows: protojson
// alone puts spaces after commas and colons in some builds and not others
// (issue 22, item 7).
func TestJSONAnswersAreCompact(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	got := string(s.postJSONBytes(t, pointledgerv1connect.LedgerServiceGetBalanceProcedure, `{"user_id":"nobody"}`))
	want := `{"user_id":"nobody","balance":"0","version":"0","status":"ACCOUNT_STATUS_ACTIVE","expiring":[],"available":"0","held":"0","pending":"0","maturing":[],"kinds":[],"spendable":"0"}`
	if got != want {
		t.Errorf("GetBalance answered\n%s\nwant\n%s", got, want)
	}
	// An answer with nested objects, lists and a map.
	grant := s.postJSONBytes(t, pointledgerv1connect.LedgerServiceGrantProcedure,
		`{"user_id":"alice","amount":"10","request_id":"g","metadata":{"shop":"berlin","campaign":"autumn"}}`)
	var compact bytes.Buffer
	if err := json.Compact(&compact, grant); err != nil {
		t.Fatal(err)
	}
	if compact.String() != string(grant) {
		t.Errorf("Grant answered\n%s\nwant it compact:\n%s", grant, compact.String())
	}
}

// JSON answers carry every field, zero values included, so a client reads
// the same shape whatever the values: a new user's version is "0" (an int64
// is a JSON string), replayed is false, an empty list is [], and a field
// that does not apply is "" (never "0", which is a real zero). A timestamp
// that is not set is left out, not null.
func TestJSONAnswersCarryZeroValues(t *testing.T) {
	t.Parallel()
	s := newServer(t)
	check := func(what string, got map[string]any, want map[string]any) {
		t.Helper()
		for k, v := range want {
			g, ok := got[k]
			if !ok {
				t.Errorf("%s: no %q in %v", what, k, got)
			} else if !reflect.DeepEqual(g, v) {
				t.Errorf("%s: %q = %#v, want %#v", what, k, g, v)
			}
		}
	}
	balance := s.postJSON(t, pointledgerv1connect.LedgerServiceGetBalanceProcedure, `{"user_id":"nobody"}`)
	check("balance of a new user", balance, map[string]any{
		"user_id": "nobody", "balance": "0", "version": "0", "status": "ACCOUNT_STATUS_ACTIVE",
		"expiring": []any{}, "available": "0", "held": "0",
	})
	for _, c := range []struct{ procedure, list string }{
		{pointledgerv1connect.LedgerServiceListHoldsProcedure, "holds"},
		{pointledgerv1connect.LedgerServiceListHistoryProcedure, "items"},
		{pointledgerv1connect.LedgerServiceListEntriesProcedure, "entries"},
	} {
		got := s.postJSON(t, c.procedure, `{"user_id":"nobody"}`)
		check(c.procedure+" of a new user", got, map[string]any{c.list: []any{}, "next_page_token": ""})
	}

	grant := s.postJSON(t, pointledgerv1connect.LedgerServiceGrantProcedure, `{"user_id":"alice","amount":"10","request_id":"g"}`)
	check("grant", grant, map[string]any{"balance": "10", "replayed": false})
	entry, _ := grant["entry"].(map[string]any)
	check("grant's entry", entry, map[string]any{
		"version": "1", "order_id": "", "metadata": map[string]any{}, "draws": []any{},
		"refunded_amount": "", "purchase_request_id": "", "reason": "", "explains_balance": false,
		"held_change": "", "held_after": "", "hold_request_id": "",
	})
	if v, ok := entry["expire_time"]; ok {
		t.Errorf("grant that never expires: expire_time = %#v, want none", v)
	}
	purchase := s.postJSON(t, pointledgerv1connect.LedgerServicePurchaseProcedure, `{"user_id":"alice","amount":"4","request_id":"p"}`)
	check("purchase", purchase, map[string]any{"balance": "6", "replayed": false})
	entry, _ = purchase["entry"].(map[string]any)
	check("purchase's entry", entry, map[string]any{"amount": "-4", "refunded_amount": "0", "held_change": ""})
	again := s.postJSON(t, pointledgerv1connect.LedgerServicePurchaseProcedure, `{"user_id":"alice","amount":"4","request_id":"p"}`)
	check("the purchase again", again, map[string]any{"replayed": true})

	hold := s.postJSON(t, pointledgerv1connect.LedgerServiceAuthorizeProcedure, `{"user_id":"alice","amount":"1","request_id":"h"}`)
	check("authorize", hold, map[string]any{"replayed": false, "held": "1"})
	check("its hold", hold["hold"].(map[string]any), map[string]any{"state": "HOLD_STATE_HELD", "captured_amount": ""})
	void := s.postJSON(t, pointledgerv1connect.LedgerServiceVoidProcedure, `{"user_id":"alice","hold_request_id":"h","request_id":"v"}`)
	check("void's entry", void["entry"].(map[string]any), map[string]any{
		"amount": "0", "held_change": "-1", "held_after": "0", "refunded_amount": "", "reason": "VOIDED",
	})

	history := s.postJSON(t, pointledgerv1connect.LedgerServiceListHistoryProcedure, `{"user_id":"alice","oldest_first":true}`)
	items, _ := history["items"].([]any)
	if len(items) != 4 {
		t.Fatalf("history of alice: %v, want 4 items", history)
	}
	check("history's grant", items[0].(map[string]any), map[string]any{"refunded_amount": "", "refund_status": "REFUND_STATUS_UNSPECIFIED"})
	check("history's purchase", items[1].(map[string]any), map[string]any{"refunded_amount": "0", "refund_status": "REFUND_STATUS_NOT_REFUNDED"})
}
