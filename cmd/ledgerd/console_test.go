package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
)

// screenshotPath is where the browser test leaves its picture of a user's
// page, which docs/console.md shows.
const screenshotPath = "../../docs/console-user.png"

// TestConsoleInABrowser drives Debian's Chromium, headless, through the
// console of a ledgerd on DynamoDB Local, as a person would: an admin signs
// in, creates a point kind (its hostile description shown as text), looks a
// user up, adjusts, adjusts in the kind and sees it in the kinds' table,
// reads the month's statement, is refused a debit past the balance with
// its reason, and signs out; a support operator is
// refused past its limits. No page may raise a JavaScript error (there is
// no script) or break its Content-Security-Policy.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	p := startLedgerd(t, "LEDGER_CONSOLE=true", "LEDGER_SUPPORT_MAX_ADJUSTMENT=50", "LEDGER_SUPPORT_DAILY_LIMIT=80")
	seedConsoleUser(t, p, "alice")

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1100))
	defer cancelAlloc()
	browser, closeBrowser := chromedp.NewContext(allocCtx)
	defer closeBrowser()
	// The first Run starts the browser, and must have no deadline: a
	// deadline there would stop the browser with it.
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	var mu sync.Mutex
	var problems, seen []string
	go func() {
		for m, err := range chromedp.Console(browser) {
			if err != nil {
				return
			}
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s %s: %s", m.Type, m.Source, m.Text))
			// An answer's HTTP status (a refusal is 422 or 403) is the
			// network's news, not the page's.
			if m.IsException() || m.Type == chromedp.ConsoleError && m.Source != "network" || m.Source == "security" {
				problems = append(problems, m.String())
			}
			mu.Unlock()
		}
	}()
	// Every step waits on what the page shows, for at most 2 minutes: a
	// bound on a hang, not a measure of speed.
	ctx, cancel := context.WithTimeout(browser, 2*time.Minute)
	defer cancel()
	base := "http://" + p.addr + "/console/"
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			loc, _ := chromedp.Run(browser, chromedp.Location())
			html, _ := chromedp.Run(browser, chromedp.OuterHTML(chromedp.CSS("main")))
			t.Fatalf("%s: %v (at %s)\n%s", what, err, loc, html)
		}
	}
	signIn := func(token string) {
		t.Helper()
		do("sign in", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token), chromedp.Click(chromedp.CSS("#signin")),
			chromedp.WaitVisible(chromedp.CSS("#signout")))
	}
	adjust := func(amount string, debit bool, reason string) {
		t.Helper()
		steps := []chromedp.Action[chromedp.Void]{
			chromedp.SendKeys(chromedp.CSS(`#adjust input[name="amount"]`), amount),
			chromedp.SendKeys(chromedp.CSS(`#adjust input[name="reason"]`), reason),
		}
		if debit {
			steps = append(steps, chromedp.Click(chromedp.CSS(`#adjust input[name="debit"]`)))
		}
		do("adjust "+amount, append(steps, chromedp.Click(chromedp.CSS(`#adjust button`)))...)
	}

	// An admin signs in, creates a point kind through its page (its
	// description, hostile, shown as text), and looks alice up.
	signIn(p.creds.AdminToken)
	hostile := `"><script>alert(1)</script><img src=x onerror=alert(2)>`
	do("create a kind", chromedp.Navigate(base+"kinds"), chromedp.WaitVisible(chromedp.CSS("#create-kind")),
		chromedp.SendKeys(chromedp.CSS(`#create-kind input[name="kind_id"]`), "limited"),
		chromedp.SendKeys(chromedp.CSS(`#create-kind input[name="description"]`), hostile),
		chromedp.SendKeys(chromedp.CSS(`#create-kind input[name="priority"]`), "10"),
		chromedp.Click(chromedp.CSS("#create-kind button")), chromedp.WaitVisible(chromedp.CSS(`tr[data-kind="limited"]`)))
	if got := text(`tr[data-kind="limited"] [data-field="description"]`); got != hostile {
		t.Errorf("the kind's description on the page: %q, want the text %q", got, hostile)
	}
	if got := text(`tr[data-kind="limited"] [data-field="priority"]`); got != "10" {
		t.Errorf("the kind's priority: %q, want 10", got)
	}
	do("home", chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#user_id")))
	do("look alice up", chromedp.SendKeys(chromedp.CSS("#user_id"), "alice"), chromedp.Click(chromedp.CSS("#lookup")),
		chromedp.WaitVisible(chromedp.CSS(`[data-field="balance"]`)))
	if got := text(`[data-field="balance"]`); got != "165" {
		t.Errorf("alice's balance: %q, want 165", got)
	}
	if got := text(`[data-field="held"]`); got != "10" {
		t.Errorf("alice's held points: %q, want 10", got)
	}
	// An adjustment, and its entry at the top (version 6, after three grants, a
	// purchase, a hold).
	adjust("25", false, "goodwill: late delivery")
	do("see the adjustment", chromedp.WaitVisible(chromedp.CSS(`tr[data-version="6"]`)))
	if got := text(`[data-field="balance"]`); got != "190" {
		t.Errorf("alice's balance after the adjustment: %q, want 190", got)
	}
	if row := text(`tr[data-version="6"]`); !strings.Contains(row, "goodwill: late delivery") || !strings.Contains(row, "operator=dev-admin") {
		t.Errorf("the adjustment's row: %q, want its reason and operator", row)
	}
	// An adjustment of a kind: the kinds' table has it, in spending order.
	do("choose the kind", chromedp.SetValue(chromedp.CSS(`#adjust select[name="kind"]`), "limited"))
	adjust("20", false, "spring campaign")
	do("see the kind", chromedp.WaitVisible(chromedp.CSS(`tr[data-version="7"]`)), chromedp.WaitVisible(chromedp.CSS(`tr[data-kind="limited"]`)))
	for sel, want := range map[string]string{
		`tr[data-kind="limited"] [data-field="kind-balance"]`:    "20",
		`tr[data-kind="standard"] [data-field="kind-balance"]`:   "190",
		`tr[data-kind="standard"] [data-field="kind-available"]`: "180",
		`tr[data-kind="standard"] [data-field="kind-held"]`:      "10",
		`[data-field="spendable"]`:                               "200",
		`[data-field="balance"]`:                                 "210",
	} {
		if got := text(sel); got != want {
			t.Errorf("after 20 limited points: %s is %q, want %s", sel, got, want)
		}
	}
	if got := text(`table.kinds tr:nth-child(2) [data-field="kind"]`); got != "limited" {
		t.Errorf("the first kind spent: %q, want limited (priority 10 before standard's 50)", got)
	}
	// This month's statement (the form's month unless changed): the two
	// adjustments in its totals.
	do("the month's statement", chromedp.Click(chromedp.CSS("#show-statement")), chromedp.WaitVisible(chromedp.CSS(`[data-field="closing_balance"]`)))
	if got := text(`[data-field="adjusted"]`); got != "45" {
		t.Errorf("the statement's adjusted: %q, want 45 (25 + 20)", got)
	}
	if got := text(`[data-field="closing_balance"]`); got != "210" {
		t.Errorf("the statement's closing balance: %q, want 210", got)
	}
	if got := text(`[data-field="opening_balance"]`); got != "0" {
		t.Errorf("the statement's opening balance: %q, want 0 (alice began this month)", got)
	}
	do("the statement's entries", chromedp.WaitVisible(chromedp.CSS(`.statement-entries tr[data-version="7"]`)))
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.FromSlash(screenshotPath), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	// Refused: a debit past the balance, with the ledger's reason.
	adjust("10000", true, "too much")
	do("see the refusal", chromedp.WaitVisible(chromedp.CSS(`[data-field="reason"]`)))
	if got := text(`[data-field="reason"]`); got != "INSUFFICIENT_BALANCE" {
		t.Errorf("a debit past the balance: reason %q, want INSUFFICIENT_BALANCE", got)
	}
	do("sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))
	do("alice's page after signing out", chromedp.Navigate(base+"users/alice"), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))

	// A support operator: 50 at most at once, 80 a day.
	signIn(p.creds.SupportToken)
	do("alice, as support", chromedp.Navigate(base+"users/alice"), chromedp.WaitVisible(chromedp.CSS("#adjust")))
	adjust("60", false, "over one adjustment")
	do("see the refusal", chromedp.WaitVisible(chromedp.CSS(`[data-field="reason"]`)))
	if got := text(`[data-field="reason"]`); got != "ADJUSTMENT_OVER_LIMIT" {
		t.Errorf("support adjusts 60 of 50 at most: reason %q", got)
	}
	adjust("50", false, "within the limits")
	do("see it", chromedp.WaitVisible(chromedp.CSS(`tr[data-version="8"]`)))
	adjust("40", false, "past the day's 80")
	do("see the refusal", chromedp.WaitVisible(chromedp.CSS(`[data-field="reason"]`)))
	if got := text(`[data-field="reason"]`); got != "DAILY_LIMIT_REACHED" {
		t.Errorf("support past its day: reason %q", got)
	}
	if row := text(`tr[data-version="8"]`); !strings.Contains(row, "operator=dev-support") {
		t.Errorf("the support operator's adjustment: %q, want its operator", row)
	}
	// The other pages render, and raise nothing either.
	for _, path := range []string{"budgets", "webhooks", "kinds", "books"} {
		do(path, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("h1")))
	}
	do("run a reconciliation", chromedp.Click(chromedp.CSS("#reconcile")), chromedp.WaitVisible(chromedp.CSS(`[data-field="clean"]`)),
		// alice's points that expire, by month, drawn by the server.
		chromedp.WaitVisible(chromedp.CSS(`svg.chart rect`)),
		// and by kind: the limited points' bar.
		chromedp.WaitReady(chromedp.CSS(`svg.chart g[data-kind="limited"]`)))
	do("sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)))

	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the pages raised errors:\n%s", strings.Join(problems, "\n"))
	}
	t.Logf("console messages: %q", seen)
}

// seedConsoleUser gives user what a support page shows: points that
// expire on three dates and some that never do, a purchase of an order,
// and an open hold.
func seedConsoleUser(t *testing.T, p *ledgerdProcess, user string) {
	t.Helper()
	ctx := context.Background()
	l := p.ledgerClient()
	for i, g := range []struct {
		amount string
		ttl    time.Duration
	}{{"100", 30 * 24 * time.Hour}, {"50", 90 * 24 * time.Hour}, {"30", 0}} {
		req := &pb.GrantRequest{UserId: user, Amount: g.amount, RequestId: fmt.Sprintf("seed-grant-%d", i), OrderId: fmt.Sprintf("welcome-%d", i)}
		if g.ttl > 0 {
			req.Ttl = durationpb.New(g.ttl)
		}
		if _, err := l.Grant(ctx, connect.NewRequest(req)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: user, Amount: "15", RequestId: "seed-purchase", OrderId: "order-1042"})); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Authorize(ctx, connect.NewRequest(&pb.AuthorizeRequest{UserId: user, Amount: "10", RequestId: "seed-hold", OrderId: "order-1043"})); err != nil {
		t.Fatal(err)
	}
}

// A support operator's limit of the day holds across the instances of a
// deployment and their restarts: its total is one item of the lease table.
func TestSupportDailyLimitAcrossInstances(t *testing.T) {
	t.Parallel()
	p := newLedgerd(t, false, "LEDGER_SUPPORT_MAX_ADJUSTMENT=50", "LEDGER_SUPPORT_DAILY_LIMIT=80")
	p.start(t)
	q := p.another(t)
	q.start(t)
	ctx := context.Background()
	adjust := func(on *ledgerdProcess, amount, requestID string) error {
		a := pointledgerv1connect.NewAdminServiceClient(http.DefaultClient, "http://"+on.addr, connect.WithInterceptors(auth.Bearer(on.creds.SupportToken)))
		_, err := a.Adjust(ctx, connect.NewRequest(&pb.AdjustRequest{UserId: "carol", Amount: amount, RequestId: requestID, Reason: "goodwill"}))
		return err
	}
	if err := adjust(p, "50", "a1"); err != nil {
		t.Fatal(err)
	}
	if err := adjust(q, "30", "a2"); err != nil {
		t.Fatal(err)
	}
	// 80 adjusted today, 50 through one instance and 30 through the other.
	r := q.another(t) // as after a restart
	r.start(t)
	for _, on := range []*ledgerdProcess{p, q, r} {
		if err := adjust(on, "0.01", "a3-"+on.addr); client.ReasonOf(err) != client.ReasonDailyLimitReached {
			t.Errorf("%s: one more cent past 80: %v, want DAILY_LIMIT_REACHED", on.addr, err)
		}
	}
	res, err := p.ledgerClient().GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "carol"}))
	if err != nil || res.Msg.Balance != "80" {
		t.Errorf("carol's balance: %v, %v; want 80", res, err)
	}
}
