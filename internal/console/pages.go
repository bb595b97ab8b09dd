package console

import (
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/auth"
)

// EntriesPerPage is how many entries a user page shows at once.
const EntriesPerPage = 50

// userPage is what /console/users/{user_id} shows.
type userPage struct {
	UserID    string
	Balance   *pb.GetBalanceResponse
	Status    string
	Frozen    bool
	Entries   []entryRow
	Next      string // the next page's token; "" on the last
	Paged     bool   // not the first page
	Behind    string // the history has not caught up with the version asked for
	Holds     []*pb.Hold
	Expiring  chart
	RequestID string // the next action's, fresh on every page: a resubmitted form replays
	// Kinds are GetBalance's: each kind the user holds or has pending,
	// in spending order.
	Kinds []*pb.KindBalance
	// KindIDs are the program's kinds (ListPointKinds), for the adjust
	// form; empty if they could not be read.
	KindIDs []string
	// Statement is the month asked for (?statement=YYYY-MM); nil if none.
	Statement *statement
	// Month is the statement form's month: the one shown, else this one.
	Month string
}

// statement is a month of the user's account, GetStatement's.
type statement struct {
	Month            string
	Opening, Closing string
	Totals           *pb.StatementTotals
	Unrecorded       string
	Entries          []entryRow
	Next             string // the next page's token; "" on the last
	Paged            bool
}

type entryRow struct {
	Version      int64
	Time         string
	Type         string
	Amount       string
	BalanceAfter string
	Draws        string
	Order        string
	Reason       string
	RequestID    string
	Metadata     string
}

func (c *Console) findUser(v *visit) {
	u := strings.TrimSpace(v.r.FormValue("user_id"))
	if u == "" {
		http.Redirect(v.w, v.r, Prefix, http.StatusSeeOther)
		return
	}
	http.Redirect(v.w, v.r, Prefix+"users/"+url.PathEscape(u), http.StatusSeeOther)
}

func (c *Console) user(v *visit) {
	p, err := v.userPage(v.r.PathValue("user_id"), v.r.FormValue("page_token"), v.r.FormValue("min_version"))
	p.Month = v.c.o.Now().UTC().Format(monthLayout)
	if month := strings.TrimSpace(v.r.FormValue("statement")); err == nil && month != "" {
		p.Month = month
		p.Statement, err = v.statement(p.UserID, month, v.r.FormValue("statement_page_token"))
	}
	v.render(httpStatus(err), "user", "User "+p.UserID, p, err, notices[v.r.FormValue("done")])
}

// monthLayout is how a statement's month is written: 2026-11.
const monthLayout = "2006-01"

// statement reads a page of the user's statement of month (YYYY-MM, in
// UTC): [its first instant, the next month's).
func (v *visit) statement(user, month, pageToken string) (*statement, error) {
	start, err := time.Parse(monthLayout, month)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("a statement's month is written YYYY-MM, e.g. 2026-11"))
	}
	ctx, cancel := v.ctx()
	defer cancel()
	res, err := v.ledger.GetStatement(ctx, connect.NewRequest(&pb.GetStatementRequest{
		UserId: user, StartTime: timestamppb.New(start), EndTime: timestamppb.New(start.AddDate(0, 1, 0)),
		PageSize: EntriesPerPage, PageToken: pageToken,
	}))
	if err != nil {
		return nil, err
	}
	m := res.Msg
	st := &statement{Month: month, Opening: m.OpeningBalance, Closing: m.ClosingBalance, Totals: m.Totals,
		Unrecorded: m.UnrecordedChange, Next: m.NextPageToken, Paged: pageToken != ""}
	for _, e := range m.Entries {
		st.Entries = append(st.Entries, entryRow{
			Version: e.Version, Time: formatTime(e.CreateTime), Type: entryType(e.Type), Amount: e.Amount,
			BalanceAfter: e.BalanceAfter, Draws: draws(e.Draws), Order: e.OrderId, Reason: e.Reason,
			RequestID: e.RequestId, Metadata: metadata(e.Metadata),
		})
	}
	return st, nil
}

// notices say what a redirect after an action did; by key, so that no
// text of a URL is shown as the console's own.
var notices = map[string]string{
	"adjust": "Adjusted: the entry is at the top of the list.",
	"status": "The account's status is changed.",
	"void":   "The hold is voided.",
	"topup":  "The budget is topped up.",
	"close":  "The budget is closed.",

	"kind-created": "The kind is created: usable at once.",
	"kind-updated": "The kind is changed: spends follow it within ledgerd's -kind-refresh.",
}

// userPage reads what the user page shows: its balance, a page of its
// history newest first (waiting for minVersion, the version of an entry
// just written), and its open holds.
func (v *visit) userPage(user, pageToken, minVersion string) (*userPage, error) {
	ctx, cancel := v.ctx()
	defer cancel()
	p := &userPage{UserID: user, RequestID: "console-" + client.NewRequestID(), Paged: pageToken != ""}
	bal, err := v.ledger.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: user}))
	if err != nil {
		return p, err
	}
	p.Balance = bal.Msg
	p.Frozen = bal.Msg.Status == pb.AccountStatus_ACCOUNT_STATUS_FROZEN
	p.Status = "active"
	if p.Frozen {
		p.Status = "frozen"
	}
	p.Expiring = expiryChart(bal.Msg.Expiring)
	p.Kinds = bal.Msg.Kinds
	if ks, err := v.kinds.ListPointKinds(ctx, connect.NewRequest(&pb.ListPointKindsRequest{})); err == nil {
		for _, k := range ks.Msg.Kinds {
			p.KindIDs = append(p.KindIDs, k.KindId)
		}
	}
	min, _ := strconv.ParseInt(minVersion, 10, 64)
	if min < 0 || min > bal.Msg.Version {
		min = 0
	}
	req := &pb.ListHistoryRequest{UserId: user, PageSize: EntriesPerPage, PageToken: pageToken, MinVersion: min}
	hist, err := v.ledger.ListHistory(ctx, connect.NewRequest(req))
	if err != nil && client.ReasonOf(err) == client.ReasonHistoryBehind {
		// Show what there is, and say so.
		p.Behind = messageOf(err)
		req.MinVersion = 0
		hist, err = v.ledger.ListHistory(ctx, connect.NewRequest(req))
	}
	if err != nil {
		return p, err
	}
	p.Next = hist.Msg.NextPageToken
	for _, it := range hist.Msg.Items {
		p.Entries = append(p.Entries, entryRow{
			Version: it.Version, Time: formatTime(it.CreateTime), Type: entryType(it.Type), Amount: it.Amount,
			BalanceAfter: it.BalanceAfter, Draws: draws(it.Draws), Order: it.OrderId, Reason: it.Reason,
			RequestID: it.RequestId, Metadata: metadata(it.Metadata),
		})
	}
	holds, err := v.ledger.ListHolds(ctx, connect.NewRequest(&pb.ListHoldsRequest{UserId: user, States: []pb.HoldState{pb.HoldState_HOLD_STATE_HELD}, PageSize: 100}))
	if err != nil {
		return p, err
	}
	p.Holds = holds.Msg.Holds
	return p, nil
}

// failed renders the user page again with the refusal of an action.
func (v *visit) failed(user string, err error) {
	p, perr := v.userPage(user, "", "")
	if perr != nil {
		err = errors.Join(err, perr)
	}
	v.render(httpStatus(err), "user", "User "+user, p, err, "")
}

func (c *Console) adjust(v *visit) {
	user := v.r.PathValue("user_id")
	f := v.r.PostForm
	req := &pb.AdjustRequest{
		UserId: user, Amount: strings.TrimSpace(f.Get("amount")), RequestId: f.Get("request_id"),
		Reason: strings.TrimSpace(f.Get("reason")), Debit: f.Get("debit") == "true",
		Kind: strings.TrimSpace(f.Get("kind")),
		// Who did it, on the entry (a support token's is set by auth too).
		Metadata: map[string]string{auth.OperatorKey: v.id.Subject},
	}
	if req.Reason == "" {
		v.failed(user, connect.NewError(connect.CodeInvalidArgument, errors.New("an adjustment needs a reason")))
		return
	}
	ctx, cancel := v.ctx()
	defer cancel()
	res, err := v.admin.Adjust(ctx, connect.NewRequest(req))
	if err != nil {
		v.failed(user, err)
		return
	}
	v.done(user, "adjust", res.Msg.Entry.GetVersion())
}

// done sends the browser back to the user page after a change (a reload
// does not post again), reading its history at least to version.
func (v *visit) done(user, what string, version int64) {
	q := url.Values{"done": {what}}
	if version > 0 {
		q.Set("min_version", strconv.FormatInt(version, 10))
	}
	http.Redirect(v.w, v.r, Prefix+"users/"+url.PathEscape(user)+"?"+q.Encode(), http.StatusSeeOther)
}

func (c *Console) setStatus(v *visit) {
	user := v.r.PathValue("user_id")
	status := pb.AccountStatus_ACCOUNT_STATUS_UNSPECIFIED
	switch v.r.PostForm.Get("status") {
	case "frozen":
		status = pb.AccountStatus_ACCOUNT_STATUS_FROZEN
	case "active":
		status = pb.AccountStatus_ACCOUNT_STATUS_ACTIVE
	}
	ctx, cancel := v.ctx()
	defer cancel()
	_, err := v.admin.SetAccountStatus(ctx, connect.NewRequest(&pb.SetAccountStatusRequest{UserId: user, Status: status, Reason: v.r.PostForm.Get("reason")}))
	if err != nil {
		v.failed(user, err)
		return
	}
	v.done(user, "status", 0)
}

func (c *Console) void(v *visit) {
	user := v.r.PathValue("user_id")
	ctx, cancel := v.ctx()
	defer cancel()
	res, err := v.ledger.Void(ctx, connect.NewRequest(&pb.VoidRequest{
		UserId: user, HoldRequestId: v.r.PostForm.Get("hold_request_id"), RequestId: v.r.PostForm.Get("request_id"),
		Metadata: map[string]string{auth.OperatorKey: v.id.Subject},
	}))
	if err != nil {
		v.failed(user, err)
		return
	}
	v.done(user, "void", res.Msg.Entry.GetVersion())
}

type budgetRow struct {
	*pb.Budget
	Open      bool
	Left      float64 // remaining, in percent of the total: the bar's length
	RequestID string
}

func (c *Console) budgets(v *visit) { v.budgetsPage(nil, notices[v.r.FormValue("done")]) }

func (v *visit) budgetsPage(failed error, notice string) {
	ctx, cancel := v.ctx()
	defer cancel()
	var rows []budgetRow
	res, err := v.budget.ListBudgets(ctx, connect.NewRequest(&pb.ListBudgetsRequest{PageSize: 100, PageToken: v.r.FormValue("page_token")}))
	if err == nil {
		for _, b := range res.Msg.Budgets {
			rows = append(rows, budgetRow{Budget: b, Open: b.Status == pb.BudgetStatus_BUDGET_STATUS_OPEN,
				Left: percent(b.Remaining, b.Total), RequestID: "console-" + client.NewRequestID()})
		}
	}
	if failed == nil {
		failed = err
	}
	v.render(httpStatus(failed), "budgets", "Budgets", rows, failed, notice)
}

func (c *Console) topUp(v *visit) {
	ctx, cancel := v.ctx()
	defer cancel()
	f := v.r.PostForm
	_, err := v.budget.TopUpBudget(ctx, connect.NewRequest(&pb.TopUpBudgetRequest{BudgetId: f.Get("budget_id"), Amount: strings.TrimSpace(f.Get("amount")), RequestId: f.Get("request_id")}))
	if err != nil {
		v.budgetsPage(err, "")
		return
	}
	http.Redirect(v.w, v.r, Prefix+"budgets?done=topup", http.StatusSeeOther)
}

func (c *Console) closeBudget(v *visit) {
	ctx, cancel := v.ctx()
	defer cancel()
	if _, err := v.budget.CloseBudget(ctx, connect.NewRequest(&pb.CloseBudgetRequest{BudgetId: v.r.PostForm.Get("budget_id")})); err != nil {
		v.budgetsPage(err, "")
		return
	}
	http.Redirect(v.w, v.r, Prefix+"budgets?done=close", http.StatusSeeOther)
}

type endpointRow struct {
	*pb.WebhookEndpoint
	Failed []deliveryRow
	Error  *refusal
}

type deliveryRow struct {
	*pb.WebhookDelivery
	Next string
}

func (c *Console) webhooks(v *visit) { v.webhooksPage(nil, "") }

func (v *visit) webhooksPage(failed error, notice string) {
	ctx, cancel := v.ctx()
	defer cancel()
	var rows []endpointRow
	res, err := v.webhooks.ListWebhookEndpoints(ctx, connect.NewRequest(&pb.ListWebhookEndpointsRequest{PageSize: 100}))
	if err == nil {
		for _, e := range res.Msg.Endpoints {
			row := endpointRow{WebhookEndpoint: e}
			d, derr := v.webhooks.ListWebhookDeliveries(ctx, connect.NewRequest(&pb.ListWebhookDeliveriesRequest{
				EndpointId: e.EndpointId, States: []pb.DeliveryState{pb.DeliveryState_DELIVERY_STATE_FAILED}, PageSize: 20,
			}))
			row.Error = refusalOf(derr)
			if derr == nil {
				for _, x := range d.Msg.Deliveries {
					row.Failed = append(row.Failed, deliveryRow{WebhookDelivery: x, Next: formatTime(x.NextAttemptTime)})
				}
			}
			rows = append(rows, row)
		}
	}
	if failed == nil {
		failed = err
	}
	v.render(httpStatus(failed), "webhooks", "Webhooks", rows, failed, notice)
}

func (c *Console) redeliver(v *visit) {
	ctx, cancel := v.ctx()
	defer cancel()
	f := v.r.PostForm
	from, _ := strconv.ParseInt(f.Get("from_version"), 10, 64)
	res, err := v.webhooks.RedeliverWebhookEvents(ctx, connect.NewRequest(&pb.RedeliverWebhookEventsRequest{
		EndpointId: f.Get("endpoint_id"), UserId: f.Get("user_id"), FromVersion: from,
	}))
	if err != nil {
		v.webhooksPage(err, "")
		return
	}
	v.webhooksPage(nil, "Queued again: "+strconv.FormatInt(res.Msg.Count, 10)+" events.")
}

type booksPage struct {
	Report    *pb.ReconcileReport
	Liability chart
	Breakage  chart
	Pending   chart
}

func (c *Console) books(v *visit) {
	v.render(http.StatusOK, "books", "Books", booksPage{}, nil, "")
}

// reconcile runs a reconciliation of every user (or of user_id) and shows
// its report: findings, and liability and breakage by month.
func (c *Console) reconcile(v *visit) {
	ctx, cancel := v.ctx()
	defer cancel()
	stream, err := v.admin.Reconcile(ctx, connect.NewRequest(&pb.ReconcileRequest{UserId: strings.TrimSpace(v.r.PostForm.Get("user_id"))}))
	var report *pb.ReconcileReport
	if err == nil {
		for stream.Receive() {
			if r := stream.Msg().GetReport(); r != nil {
				report = r
			}
		}
		err = stream.Err()
		_ = stream.Close()
	}
	if err == nil && report == nil {
		err = errors.New("the reconciliation ended without its report")
	}
	p := booksPage{Report: report}
	if report != nil {
		p.Liability, p.Breakage, p.Pending = monthChart(report.Liability), monthChart(report.Breakage), monthChart(report.Pending)
	}
	v.render(httpStatus(err), "books", "Books", p, err, "")
}

// httpStatus is the page's status for an API error.
func httpStatus(err error) int {
	if err == nil {
		return http.StatusOK
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeOutOfRange, connect.CodeAlreadyExists:
		return http.StatusUnprocessableEntity
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeResourceExhausted:
		return http.StatusTooManyRequests
	default:
		return http.StatusBadGateway
	}
}

func formatTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format("2006-01-02 15:04:05")
}

func entryType(t pb.EntryType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "ENTRY_TYPE_"))
}

func draws(ds []*pb.Draw) string {
	var parts []string
	for _, d := range ds {
		when := "never expiring"
		if d.ExpireTime != nil {
			when = "expiring " + d.ExpireTime.AsTime().UTC().Format(time.DateOnly)
		}
		parts = append(parts, d.Amount+" "+kindName(d.Kind)+" "+when)
	}
	return strings.Join(parts, "; ")
}

func metadata(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, "; ")
}

func percent(part, whole string) float64 {
	p, err1 := decimal.NewFromString(part)
	w, err2 := decimal.NewFromString(whole)
	if err1 != nil || err2 != nil || !w.IsPositive() {
		return 0
	}
	f, _ := p.Div(w).Mul(decimal.NewFromInt(100)).Float64()
	return min(max(f, 0), 100)
}
