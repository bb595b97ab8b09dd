package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pointledger/pointledger/internal/reconcile"
)

// exitError ends ledgerd with a code of its own: reconcile exits 1 on
// findings, 2 when it could not finish.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func reconcileCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fail := func(err error) error { return &exitError{code: 2, err: err} }
	var c Config
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := c.flags(fs, getenv); err != nil {
		return fail(err)
	}
	var o reconcile.Options
	fs.IntVar(&o.Segments, "segments", 4, "parallel scan segments (and workers)")
	fs.IntVar(&o.Rate, "rate", 0, "read at most this many items a second (about the read capacity used); 0: no limit")
	fs.StringVar(&o.User, "user", "", "reconcile only this user")
	fs.BoolVar(&o.RepairProjection, "repair-projection", false, "rebuild the history of users whose projection disagrees with the ledger")
	fs.DurationVar(&o.ProjectionGrace, "projection-grace", 5*time.Second, "how long a projection behind the ledger may take to catch up before it is a finding")
	fs.DurationVar(&o.SweepGrace, "sweep-grace", reconcile.DefaultSweepGrace, "how long an expired bucket or hold may stay off the record before it is a finding (expiry_not_recorded)")
	jsonFile := fs.String("json", "", "write the report as JSON to this file")
	asOf := fs.String("as-of", "", "liability, breakage and pending as of this time (RFC 3339, e.g. 2026-03-31T23:59:59.999999Z, a month's last instant); empty: now")
	if err := fs.Parse(args); err != nil {
		return fail(err)
	}
	if *asOf != "" {
		t, err := time.Parse(time.RFC3339Nano, *asOf)
		if err != nil {
			return fail(fmt.Errorf("-as-of: %w", err))
		}
		o.AsOf = t
	}
	log, err := c.logger(stderr)
	if err != nil {
		return fail(err)
	}
	parts, err := c.parts(ctx, getenv, log)
	if err != nil {
		return fail(err)
	}
	o.Progress = progressPrinter(stderr)
	rep, err := reconcile.New(parts.store, parts.history, c.leaseTable(parts)).Run(ctx, o)
	if err != nil {
		return fail(err)
	}
	if *jsonFile != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonFile, append(b, '\n'), 0o644); err != nil {
			return fail(err)
		}
	}
	printReport(stdout, rep)
	if n := rep.Unrepaired(); n > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d findings", n)}
	}
	return nil
}

// progressPrinter draws a bar on a terminal and prints a line every few
// seconds anywhere else (a log, a pipe).
func progressPrinter(w io.Writer) func(reconcile.Progress) {
	f, ok := w.(*os.File)
	terminal := false
	if ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			terminal = true
		}
	}
	var lastLine time.Time
	return func(p reconcile.Progress) {
		users := fmt.Sprintf("%d users", p.Users)
		frac := 0.0
		if p.TotalUsers > 0 {
			users = fmt.Sprintf("%d/%d users", p.Users, p.TotalUsers)
			frac = min(1, float64(p.Users)/float64(p.TotalUsers))
		}
		rest := fmt.Sprintf("%s  %d entries  %d findings  %s", users, p.Entries, p.Findings, p.Elapsed.Round(100*time.Millisecond))
		if terminal {
			const width = 30
			n := int(frac * width)
			fmt.Fprintf(w, "\r[%s%s] %3.0f%%  %s   ", strings.Repeat("#", n), strings.Repeat(".", width-n), frac*100, rest)
			return
		}
		if time.Since(lastLine) >= 2*time.Second {
			lastLine = time.Now()
			fmt.Fprintf(w, "reconcile: %s\n", rest)
		}
	}
}

func printReport(w io.Writer, r reconcile.Report) {
	fmt.Fprintf(w, "\nReconciliation of %s, started %s, took %s\n", orAll(r.User), r.StartTime.Format(time.RFC3339), time.Duration(r.DurationMS)*time.Millisecond)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  users checked\t%d\n  entries checked\t%d\n  items read\t%d\n", r.Users, r.Entries, r.ItemsRead)
	fmt.Fprintf(tw, "  sum of entries\t%s\n  sum of balances\t%s\n", r.SumOfEntries, r.SumOfBalances)
	fmt.Fprintf(tw, "  sum of pending changes\t%s\n  sum of pending\t%s\n", r.SumOfPendingChanges, r.SumOfPending)
	fmt.Fprintf(tw, "  findings\t%d (%d repaired)\n", len(r.Findings), len(r.Findings)-r.Unrepaired())
	tw.Flush()
	if len(r.Findings) > 0 {
		fmt.Fprintln(w, "\nFindings:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  user\tkind\texpected\tfound\tversions\t")
		for _, f := range r.Findings {
			user := f.UserID
			switch {
			case f.BudgetID != "":
				user = "budget " + f.BudgetID
			case user == "":
				user = "(all)"
			}
			note := ""
			if f.Repaired {
				note = "repaired"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%v\t%s\n", user, f.Kind, f.Expected, f.Found, f.Versions, note)
		}
		tw.Flush()
	}
	for _, t := range []struct {
		title string
		rows  []reconcile.MonthAmount
	}{
		{"Liability (points outstanding, by the month they expire in, and kind)" + asOfNote(r.AsOf) + ":", r.Liability},
		{"Breakage (points expired unused, by the month they expired in, and kind):", r.Breakage},
		{"Pending (points not yet spendable, by the month they mature in, and kind):", r.Pending},
	} {
		if len(t.rows) == 0 {
			continue
		}
		fmt.Fprintln(w, "\n"+t.title)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, m := range t.rows {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", m.Month, m.Kind, m.Amount)
		}
		tw.Flush()
	}
	if len(r.Budgets) > 0 {
		fmt.Fprintln(w, "\nBudgets (granted + remaining = total; grants: the sum of the grants that name it):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  budget\tstatus\ttotal\tgranted\tremaining\tgrants\tliability\tbreakage\t")
		for _, b := range r.Budgets {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", b.BudgetID, b.Status, b.Total, b.Granted, b.Remaining, b.GrantsSum, b.Liability, b.Breakage)
		}
		tw.Flush()
	}
	if len(r.Proposed) > 0 {
		fmt.Fprintln(w, "\nProposed adjustments (review, then apply with AdminService.Adjust; balances are never rewritten):")
		for _, a := range r.Proposed {
			dir := "credit"
			if a.Debit {
				dir = "debit"
			}
			fmt.Fprintf(w, "  %s: %s %s explaining balance %s (request_id %s)\n    reason: %s\n", a.UserID, dir, a.Amount, a.ExpectedBalance, a.RequestID, a.Reason)
		}
	}
	if r.Clean {
		fmt.Fprintln(w, "\nCLEAN: the books balance.")
	} else {
		fmt.Fprintf(w, "\nNOT CLEAN: %d findings.\n", r.Unrepaired())
	}
}

func orAll(user string) string {
	if user == "" {
		return "all users"
	}
	return "user " + user
}

// asOfNote says of what time the report's liability is, when it is not the
// start's.
func asOfNote(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return ", as of " + t.Format(time.RFC3339Nano)
}
