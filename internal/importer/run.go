package importer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
)

// Granter sends a grant: the client's LedgerService (client.New, whose
// Retry sends a call of unknown outcome again under its request_id).
type Granter interface {
	Grant(context.Context, *connect.Request[pb.GrantRequest]) (*connect.Response[pb.GrantResponse], error)
}

// A Check looks at a line's request before it is sent (with DryRun,
// instead). A *Refusal refuses the line; another error stops the import.
// The checks are the place for what the file can be checked against
// before anything is written: the ledger's rules for a grant's fields,
// and the program's point kinds.
type Check func(context.Context, *pb.GrantRequest) error

// Options says how Run sends.
type Options struct {
	// Concurrency is how many grants are in flight at once (at least 1).
	Concurrency int
	// DryRun runs the checks on every line and sends nothing.
	DryRun bool
	// Checks run in order on each line that parsed; the first refusal
	// refuses it.
	Checks []Check
	// Rejects, if set, gets every refused line.
	Rejects *Rejects
	// Progress, if set, is kept up to date as lines are done.
	Progress *Progress
}

// Progress is what is done so far, read while Run runs.
type Progress struct {
	Done     atomic.Int64 // lines with an outcome (granted, replayed, refused, checked)
	Granted  atomic.Int64
	Replayed atomic.Int64
	Refused  atomic.Int64
}

// Summary is what an import did.
type Summary struct {
	Lines    int // lines read (blank lines not counted)
	Sent     int // lines sent to the ledger
	Granted  int // written now
	Replayed int // written by an earlier run: its request_id's original answer
	Checked  int // DryRun: lines that passed every check
	Refused  int
	// RefusedBy counts the refusals by reason.
	RefusedBy map[string]int
	// Points by kind: what the granted and replayed lines hold (DryRun:
	// the lines that passed).
	Points map[string]decimal.Decimal
	// Interrupted: the context was cancelled before the end of the file.
	// Through is the last line read: every line up to it was sent (or
	// refused) and has its outcome; the lines after it were not sent.
	Interrupted bool
	Through     int
	Elapsed     time.Duration
}

type outcome struct {
	line     Line
	refusal  *Refusal
	replayed bool
}

// Run sends every line of r through g, Concurrency at a time, and counts
// what comes back. It returns early, with the lines in flight finished and
// counted, when ctx is cancelled (Summary.Interrupted) or when the file
// cannot be read further or a check fails (the error).
func Run(ctx context.Context, r *Reader, g Granter, o Options) (Summary, error) {
	start := time.Now()
	if o.Concurrency < 1 {
		o.Concurrency = 1
	}
	if o.Progress == nil {
		o.Progress = &Progress{}
	}
	s := Summary{RefusedBy: map[string]int{}, Points: map[string]decimal.Decimal{}}

	// The lines in flight finish even when ctx is cancelled, so that each
	// one sent has its outcome counted and, if refused, written.
	sendCtx := context.WithoutCancel(ctx)
	jobs := make(chan Line, o.Concurrency)
	results := make(chan outcome, o.Concurrency)
	var workers sync.WaitGroup
	for range o.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for l := range jobs {
				results <- send(sendCtx, g, l)
			}
		}()
	}
	var rejectErr error
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for res := range results {
			if err := s.count(res, o); err != nil && rejectErr == nil {
				rejectErr = err
			}
		}
	}()

	err := feed(ctx, r, o, jobs, results, &s)
	close(jobs)
	workers.Wait()
	close(results)
	<-collected
	s.Elapsed = time.Since(start)
	return s, errors.Join(err, rejectErr)
}

// feed reads the lines and hands each to the workers, or refuses it
// itself, until the end of the file or ctx is cancelled.
func feed(ctx context.Context, r *Reader, o Options, jobs chan<- Line, results chan<- outcome, s *Summary) error {
	for {
		if cancelled(ctx) {
			s.Interrupted = true
			return nil
		}
		l, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		s.Lines++
		if l.Refusal == nil {
			for _, check := range o.Checks {
				err := check(ctx, l.Grant)
				if ref := (*Refusal)(nil); errors.As(err, &ref) {
					l.Refusal = ref
					break
				}
				if err != nil {
					if cancelled(ctx) { // a check that reads the ledger, cut off
						s.Interrupted = true
						return nil
					}
					return err
				}
			}
		}
		switch {
		case l.Refusal != nil:
			results <- outcome{line: l, refusal: l.Refusal}
		case o.DryRun:
			results <- outcome{line: l}
		default:
			// Once read, a line is sent even if ctx is cancelled meanwhile:
			// Through then counts it.
			jobs <- l
			s.Sent++
		}
		s.Through = l.Number
	}
}

func cancelled(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

func send(ctx context.Context, g Granter, l Line) outcome {
	res, err := g.Grant(ctx, connect.NewRequest(l.Grant))
	if err != nil {
		return outcome{line: l, refusal: refusalOf(err)}
	}
	return outcome{line: l, replayed: res.Msg.GetReplayed()}
}

// refusalOf is the ledger's answer err as a Refusal: its reason, or its
// code when it has none (an outcome still unknown after the client's
// retries: unavailable, deadline_exceeded).
func refusalOf(err error) *Refusal {
	reason := string(client.ReasonOf(err))
	if reason == "" {
		reason = strings.ToUpper(connect.CodeOf(err).String())
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	return &Refusal{Reason: reason, Message: msg}
}

// count adds one outcome to s, and writes a refused line to the rejects.
// Only the collector calls it.
func (s *Summary) count(res outcome, o Options) error {
	o.Progress.Done.Add(1)
	if res.refusal != nil {
		s.Refused++
		s.RefusedBy[res.refusal.Reason]++
		o.Progress.Refused.Add(1)
		if o.Rejects != nil {
			return o.Rejects.Write(res.line, res.refusal)
		}
		return nil
	}
	switch {
	case o.DryRun:
		s.Checked++
	case res.replayed:
		s.Replayed++
		o.Progress.Replayed.Add(1)
	default:
		s.Granted++
		o.Progress.Granted.Add(1)
	}
	if amount, err := decimal.NewFromString(res.line.Grant.GetAmount()); err == nil {
		kind := KindOf(res.line.Grant)
		s.Points[kind] = s.Points[kind].Add(amount)
	}
	return nil
}

// CountLines is the number of non-blank lines of r, a quick first pass for
// a progress bar's total (a CSV file's header included, and a cell's own
// line breaks: a little more than its rows).
func CountLines(r io.Reader) (int, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	n := 0
	blank := true
	for {
		chunk, err := br.ReadSlice('\n')
		if len(bytes.TrimSpace(chunk)) > 0 {
			blank = false
		}
		if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' || (errors.Is(err, io.EOF) && len(chunk) > 0) {
			if !blank {
				n++
			}
			blank = true
		}
		switch {
		case errors.Is(err, io.EOF):
			return n, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue // a long line: its rest comes next
		case err != nil:
			return n, err
		}
	}
}
