// The README's quick start through a client generated from the OpenAPI
// description alone (openapi/pointledger.v1.openapi.yaml): types by
// openapi-typescript, calls by openapi-fetch, no casts. It grants, spends,
// replays, refunds, reads the balance (by GET too), is refused with a
// reason, holds and captures, and pages through the ledger and the history,
// checking every answer. It exits non-zero on any answer it did not
// expect, so that `make test` proves the description still fits ledgerd.
//
// It reads where ledgerd is, and a service token, from LEDGER_URL and TOKEN,
// as `make run` writes them to .local/dev.env.

import { randomUUID } from "node:crypto";

import createClient from "openapi-fetch";

import type { components, paths } from "./gen/pointledger.js";

type Schemas = components["schemas"];
type ConnectError = Schemas["connect.error"];

const ledger = "/pointledger.v1.LedgerService";

function expect<T>(what: string, got: T, want: T): void {
  if (got !== want) {
    throw new Error(`${what}: ${String(got)}, want ${String(want)}`);
  }
}

// present is a value the description may leave out (a message field) but
// that this answer must have.
function present<T>(what: string, value: T | undefined): T {
  if (value === undefined) {
    throw new Error(`${what}: absent`);
  }
  return value;
}

// answer is the data of a call that must succeed; anything else throws
// with the error ledgerd sent.
function answer<T>(what: string, r: { data?: T; error?: ConnectError; response: Response }): T {
  if (r.data === undefined) {
    throw new Error(`${what}: HTTP ${r.response.status} ${JSON.stringify(r.error)}`);
  }
  return r.data;
}

// reasonOf is the reason of ledgerd's google.rpc.ErrorInfo in a Connect
// error, the detail's debug form.
function reasonOf(err: ConnectError | undefined): string | undefined {
  return err?.details?.find((d) => d.type === "google.rpc.ErrorInfo")?.debug?.reason;
}

async function quickstart(baseUrl: string, token: string): Promise<void> {
  const client = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });
  const user = `quickstart-openapi-${randomUUID()}`; // a new user each run
  const id = (name: string) => `${name}-${randomUUID()}`;
  console.log(`quick start for ${user}`);

  // Grant 100 points; they never expire.
  const grant = answer(
    "grant",
    await client.POST(`${ledger}/Grant`, {
      body: { user_id: user, amount: "100", request_id: id("grant"), order_id: "welcome-bonus" },
    }),
  );
  const granted = present("grant's entry", grant.entry);
  expect("grant's type", granted.type, "ENTRY_TYPE_GRANT");
  expect("grant's draws", granted.draws.length, 0);
  expect("grant's expire_time", granted.expire_time, undefined);
  expect("balance after the grant", grant.balance, "100");
  expect("grant replayed", grant.replayed, false);

  // And 50 more that expire in 30 days.
  const promo = answer(
    "grant with ttl",
    await client.POST(`${ledger}/Grant`, {
      body: { user_id: user, amount: "50", request_id: id("grant"), order_id: "spring-promo", ttl: "2592000s" },
    }),
  );
  const expireTime = present("promo's expire_time", present("promo's entry", promo.entry).expire_time);
  expect("balance after the promo", promo.balance, "150");

  // Spend 30.5: the points that expire soonest go first.
  const purchaseBody = { user_id: user, amount: "30.5", request_id: id("purchase"), order_id: "order-42" };
  const purchase = answer("purchase", await client.POST(`${ledger}/Purchase`, { body: purchaseBody }));
  const spent = present("purchase's entry", purchase.entry);
  expect("purchase's amount", spent.amount, "-30.5");
  expect("purchase's draws", spent.draws.length, 1);
  expect("purchase drew from", spent.draws[0]?.expire_time, expireTime);
  expect("balance after the purchase", purchase.balance, "119.5");

  // The same purchase again: the original answer, replayed.
  const again = answer("purchase again", await client.POST(`${ledger}/Purchase`, { body: purchaseBody }));
  expect("purchase again replayed", again.replayed, true);
  expect("purchase again's entry", again.entry?.entry_id, spent.entry_id);
  expect("balance after the purchase again", again.balance, "119.5");

  // Refund 10 of it, naming it by its request_id.
  const refund = answer(
    "refund",
    await client.POST(`${ledger}/Refund`, {
      body: { user_id: user, amount: "10", request_id: id("refund"), purchase_request_id: purchaseBody.request_id },
    }),
  );
  expect("refund's purchase", present("refund's entry", refund.entry).purchase_request_id, purchaseBody.request_id);
  expect("balance after the refund", refund.balance, "129.5");

  // Read the balance, by POST and by GET (the request as JSON in the query).
  const balanceRequest: Schemas["pointledger.v1.GetBalanceRequest"] = { user_id: user };
  const balances = [
    answer("balance", await client.POST(`${ledger}/GetBalance`, { body: balanceRequest })),
    answer(
      "balance by GET",
      await client.GET(`${ledger}/GetBalance`, {
        params: { query: { encoding: "json", message: JSON.stringify(balanceRequest) } },
      }),
    ),
  ];
  for (const balance of balances) {
    expect("balance", balance.balance, "129.5");
    expect("available", balance.available, "129.5");
    expect("held", balance.held, "0");
    expect("version", String(balance.version), "4");
    expect("status", balance.status, "ACCOUNT_STATUS_ACTIVE");
    expect("expiring", balance.expiring.length, 1);
    expect("expiring amount", balance.expiring[0]?.amount, "29.5");
  }

  // Spending more than there is is refused, with a reason to branch on.
  const refused = await client.POST(`${ledger}/Purchase`, {
    body: { user_id: user, amount: "500", request_id: id("purchase") },
  });
  expect("purchase of 500: HTTP status", refused.response.status, 400);
  expect("purchase of 500: code", refused.error?.code, "failed_precondition");
  expect("purchase of 500: reason", reasonOf(refused.error), "INSUFFICIENT_BALANCE");

  // Hold 20 for an order, for 15 minutes, then capture 15 of it.
  const holdId = id("checkout");
  const authorize = answer(
    "authorize",
    await client.POST(`${ledger}/Authorize`, {
      body: { user_id: user, amount: "20", request_id: holdId, order_id: "order-43", ttl: "900s" },
    }),
  );
  expect("hold state", present("authorize's hold", authorize.hold).state, "HOLD_STATE_HELD");
  expect("available after the hold", authorize.available, "109.5");
  expect("held after the hold", authorize.held, "20");
  const capture = answer(
    "capture",
    await client.POST(`${ledger}/Capture`, {
      body: { user_id: user, hold_request_id: holdId, amount: "15", request_id: id("capture") },
    }),
  );
  const captured = present("capture's hold", capture.hold);
  expect("captured hold's state", captured.state, "HOLD_STATE_CAPTURED");
  expect("captured amount", captured.captured_amount, "15");
  expect("balance after the capture", capture.balance, "114.5");
  expect("held after the capture", capture.held, "0");
  const captureVersion = present("capture's entry", capture.entry).version;

  // Page through the ledger, oldest first, two entries a page.
  const types: Schemas["pointledger.v1.EntryType"][] = [];
  const want: typeof types = [
    "ENTRY_TYPE_GRANT",
    "ENTRY_TYPE_GRANT",
    "ENTRY_TYPE_PURCHASE",
    "ENTRY_TYPE_REFUND",
    "ENTRY_TYPE_HOLD",
    "ENTRY_TYPE_CAPTURE",
  ];
  let pageToken = "";
  do {
    const page = answer(
      "entries",
      await client.POST(`${ledger}/ListEntries`, {
        body: { user_id: user, page_size: 2, page_token: pageToken },
      }),
    );
    types.push(...page.entries.map((e) => e.type));
    pageToken = page.next_page_token;
  } while (pageToken !== "");
  expect("entries", types.join(" "), want.join(" "));

  // The history's purchases, once it has the capture: the purchase, partly
  // refunded.
  const history = answer(
    "history",
    await client.POST(`${ledger}/ListHistory`, {
      body: { user_id: user, types: ["ENTRY_TYPE_PURCHASE"], min_version: captureVersion },
    }),
  );
  expect("history items", history.items.length, 1);
  expect("history's refund status", history.items[0]?.refund_status, "REFUND_STATUS_PARTIALLY_REFUNDED");
  expect("history's refunded amount", history.items[0]?.refunded_amount, "10");
  console.log("quickstart ok");
}

async function main(): Promise<void> {
  const url = process.env["LEDGER_URL"];
  const token = process.env["TOKEN"];
  if (!url || !token) {
    throw new Error("LEDGER_URL and TOKEN are not set: start `make run`, then `. .local/dev.env`");
  }
  await quickstart(url, token);
}

main().catch((err: unknown) => {
  console.error("quickstart:", err instanceof Error ? err.message : err);
  process.exit(1);
});
