// A checkout against a running ledgerd with connect-es: grant a new user 100
// points, hold 40 for an order, read the balance (available and held),
// capture 25 of the hold, and show that capturing it again is refused, with
// the reason read from the error's google.rpc.ErrorInfo. It exits non-zero
// if any answer is not the one expected, so that `make test` proves it still
// works.
//
// It reads where ledgerd is, and a service token, from LEDGER_URL and TOKEN,
// as `make run` writes them to .local/dev.env. Its arguments are the
// protocols to run it over, one after the other: connect (the default), grpc,
// grpcweb.

import { randomUUID } from "node:crypto";

import { create } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";

import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { HoldState, LedgerService } from "./gen/pointledger/v1/ledger_pb.js";

// The reason of a ledgerd error, from its google.rpc.ErrorInfo (domain
// pointledger.v1), and whether it is a refusal replayed for its request_id.
function reasonOf(err: unknown): { reason: string; replayed: boolean } | undefined {
  const info = ConnectError.from(err)
    .findDetails(ErrorInfoSchema)
    .find((i) => i.domain === "pointledger.v1");
  return info && { reason: info.reason, replayed: info.metadata["replayed"] === "true" };
}

// Every call carries the token.
function bearer(token: string): Interceptor {
  return (next) => async (req) => {
    req.header.set("Authorization", `Bearer ${token}`);
    return next(req);
  };
}

function transport(protocol: string, baseUrl: string, token: string): Transport {
  const interceptors = [bearer(token)];
  switch (protocol) {
    case "connect":
      return createConnectTransport({ baseUrl, httpVersion: "1.1", interceptors });
    case "grpc": // HTTP/2, without TLS for an http:// URL, as ledgerd serves it
      return createGrpcTransport({ baseUrl, interceptors });
    case "grpcweb":
      return createGrpcWebTransport({ baseUrl, httpVersion: "1.1", interceptors });
    default:
      throw new Error(`protocol ${protocol}: want connect, grpc or grpcweb`);
  }
}

function expect<T>(what: string, got: T, want: T): void {
  if (got !== want) {
    throw new Error(`${what}: ${String(got)}, want ${String(want)}`);
  }
}

async function checkout(protocol: string, url: string, token: string): Promise<void> {
  const ledger = createClient(LedgerService, transport(protocol, url, token));
  // One request_id per operation, kept for its retries: the ledger applies
  // it once.
  const requestId = () => randomUUID();
  const user = `checkout-ts-${randomUUID()}`; // a new user each run
  console.log(`checkout for ${user} over ${protocol}`);

  const grant = await ledger.grant({ userId: user, amount: "100", requestId: requestId(), orderId: "welcome-bonus" });
  expect("balance after the grant", grant.balance, "100");
  console.log(`granted 100: balance ${grant.balance}`);

  // The order is placed: hold 40 points for it, for 15 minutes. Its
  // request_id names the hold.
  const order = `order-${randomUUID()}`;
  const authorize = await ledger.authorize({
    userId: user,
    amount: "40",
    requestId: requestId(),
    orderId: order,
    ttl: create(DurationSchema, { seconds: 15n * 60n }),
  });
  const hold = authorize.hold;
  if (!hold) {
    throw new Error("authorize answered without its hold");
  }
  expect("hold state", hold.state, HoldState.HELD);
  console.log(`held ${hold.amount} for ${order}`);

  const balance = await ledger.getBalance({ userId: user });
  expect("balance", balance.balance, "100");
  expect("available", balance.available, "60");
  expect("held", balance.held, "40");
  console.log(`balance ${balance.balance}, available ${balance.available}, held ${balance.held}`);

  // The order ships for 25: capture that much; the other 15 go back.
  const capture = await ledger.capture({ userId: user, holdRequestId: hold.requestId, amount: "25", requestId: requestId() });
  expect("balance", capture.balance, "75");
  expect("available", capture.available, "75");
  expect("held", capture.held, "0");
  console.log(`captured ${capture.hold?.capturedAmount}: balance ${capture.balance}, available ${capture.available}, held ${capture.held}`);

  // A hold resolves once: capturing it again is refused, for a reason a
  // program can branch on. Sent again with the same request_id, the refusal
  // comes back replayed: it was not tried anew.
  const again = { userId: user, holdRequestId: hold.requestId, requestId: requestId() };
  for (const replayed of [false, true]) {
    try {
      await ledger.capture(again);
      throw new Error("capture again: succeeded, want failed_precondition HOLD_NOT_HELD");
    } catch (err) {
      const code = ConnectError.from(err).code;
      const info = reasonOf(err);
      if (code !== Code.FailedPrecondition || info?.reason !== "HOLD_NOT_HELD" || info.replayed !== replayed) {
        throw new Error(`capture again (replayed ${replayed}): ${String(err)}, want failed_precondition HOLD_NOT_HELD`);
      }
      console.log(`capture again: refused, ${Code[code]} ${info.reason} (replayed ${info.replayed})`);
    }
  }
  console.log("checkout ok");
}

async function main(): Promise<void> {
  const url = process.env["LEDGER_URL"];
  const token = process.env["TOKEN"];
  if (!url || !token) {
    throw new Error("LEDGER_URL and TOKEN are not set: start `make run`, then `. .local/dev.env`");
  }
  const protocols = process.argv.slice(2);
  for (const protocol of protocols.length > 0 ? protocols : ["connect"]) {
    await checkout(protocol, url, token);
  }
}

main().catch((err: unknown) => {
  console.error("checkout:", err instanceof Error ? err.message : err);
  process.exit(1);
});
