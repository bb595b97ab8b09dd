// Command checkout runs a checkout against a running ledgerd with the public
// Go client (package client): it grants a new user 100 points, holds 40 for
// an order, reads the balance (available and held), captures 25 of the hold,
// and shows that capturing it again is refused, with the reason read from
// the error's google.rpc.ErrorInfo. It exits non-zero if any answer is not
// the one expected, so that `make test` proves it still works.
//
// It reads where ledgerd is, and a service token, from LEDGER_URL and TOKEN,
// as `make run` writes them to .local/dev.env:
//
//	. .local/dev.env && go run ./examples/go/checkout
//	. .local/dev.env && go run ./examples/go/checkout -protocol grpc
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/pointledger/pointledger/client"
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkout:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("checkout", flag.ContinueOnError)
	protocolName := fs.String("protocol", "connect", "connect, grpc or grpcweb")
	if err := fs.Parse(args); err != nil {
		return err
	}
	protocols := map[string]client.Protocol{"connect": client.ProtocolConnect, "grpc": client.ProtocolGRPC, "grpcweb": client.ProtocolGRPCWeb}
	protocol, ok := protocols[*protocolName]
	if !ok {
		return fmt.Errorf("-protocol %q: want connect, grpc or grpcweb", *protocolName)
	}
	url, token := getenv("LEDGER_URL"), getenv("TOKEN")
	if url == "" || token == "" {
		return errors.New("LEDGER_URL and TOKEN are not set: start `make run`, then `. .local/dev.env`")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	c := client.New(url, client.WithToken(token), client.WithProtocol(protocol))
	user := "checkout-" + client.NewRequestID() // a new user each run
	fmt.Fprintf(stdout, "checkout for %s over %s\n", user, protocol)

	grant, err := c.Ledger.Grant(ctx, connect.NewRequest(&pb.GrantRequest{
		UserId: user, Amount: "100", RequestId: client.NewRequestID(), OrderId: "welcome-bonus",
	}))
	if err != nil {
		return fmt.Errorf("grant: %w", err)
	}
	if err := expect("balance after the grant", grant.Msg.Balance, "100"); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "granted 100: balance %s\n", grant.Msg.Balance)

	// The order is placed: hold 40 points for it, for 15 minutes. Its
	// request_id names the hold.
	order := "order-" + client.NewRequestID()
	authorize, err := c.Ledger.Authorize(ctx, connect.NewRequest(&pb.AuthorizeRequest{
		UserId: user, Amount: "40", RequestId: client.NewRequestID(), OrderId: order, Ttl: durationpb.New(15 * time.Minute),
	}))
	if err != nil {
		return fmt.Errorf("authorize: %w", err)
	}
	hold := authorize.Msg.Hold
	if err := expect("hold state", hold.GetState(), pb.HoldState_HOLD_STATE_HELD); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "held %s for %s\n", hold.Amount, order)

	balance, err := c.Ledger.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: user}))
	if err != nil {
		return fmt.Errorf("get balance: %w", err)
	}
	if err := expectBalance(balance.Msg.Balance, balance.Msg.Available, balance.Msg.Held, "100", "60", "40"); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "balance %s, available %s, held %s\n", balance.Msg.Balance, balance.Msg.Available, balance.Msg.Held)

	// The order ships for 25: capture that much; the other 15 go back.
	capture, err := c.Ledger.Capture(ctx, connect.NewRequest(&pb.CaptureRequest{
		UserId: user, HoldRequestId: hold.RequestId, Amount: "25", RequestId: client.NewRequestID(),
	}))
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	if err := expectBalance(capture.Msg.Balance, capture.Msg.Available, capture.Msg.Held, "75", "75", "0"); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "captured %s: balance %s, available %s, held %s\n",
		capture.Msg.Hold.CapturedAmount, capture.Msg.Balance, capture.Msg.Available, capture.Msg.Held)

	// A hold resolves once: capturing it again is refused, for a reason a
	// program can branch on. Sent again with the same request_id, the
	// refusal comes back replayed: it was not tried anew.
	again := &pb.CaptureRequest{UserId: user, HoldRequestId: hold.RequestId, RequestId: client.NewRequestID()}
	for _, replayed := range []bool{false, true} {
		_, err := c.Ledger.Capture(ctx, connect.NewRequest(again))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || client.ReasonOf(err) != client.ReasonHoldNotHeld || client.IsReplayed(err) != replayed {
			return fmt.Errorf("capture again (replayed %v): %w (reason %q, replayed %v), want failed_precondition %s",
				replayed, err, client.ReasonOf(err), client.IsReplayed(err), client.ReasonHoldNotHeld)
		}
		fmt.Fprintf(stdout, "capture again: refused, %s %s (replayed %v)\n", connect.CodeOf(err), client.ReasonOf(err), client.IsReplayed(err))
	}
	fmt.Fprintln(stdout, "checkout ok")
	return nil
}

func expect[T comparable](what string, got, want T) error {
	if got != want {
		return fmt.Errorf("%s: %v, want %v", what, got, want)
	}
	return nil
}

func expectBalance(balance, available, held, wantBalance, wantAvailable, wantHeld string) error {
	return errors.Join(
		expect("balance", balance, wantBalance),
		expect("available", available, wantAvailable),
		expect("held", held, wantHeld),
	)
}
