// Acceptance: the official TypeScript SDK (@typesafe-ai/sdk, exactly as package-lock.json pins
// it, unmodified) against a real `baton serve` with the keyword engine, the repository's tool
// registry and policy, and two agent keys (one rate limited).
//
//   BATON_BIN=build/adapters/baton BATON_SOURCE_DIR=. node --test tests/sdk/sdk_test.mjs
//   node tests/sdk/sdk_test.mjs BATON_BIN [SOURCE_DIR]
//
// ctest runs it as test_sdk (tests/CMakeLists.txt); scripts/setup.sh installs the SDK with npm ci.
// Every request goes to 127.0.0.1 only.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { baton_process, trackedTests } from "../support/baton_process.mjs";

import {
  AuthenticationError,
  NotFoundError,
  RateLimitError,
  TypeSafeClient,
  UnprocessableEntityError,
  choice,
  noul,
  score,
} from "@typesafe-ai/sdk";

const here = path.dirname(fileURLToPath(import.meta.url));
const batonBin = process.env.BATON_BIN ?? process.argv[2];
const sourceDir = path.resolve(process.env.BATON_SOURCE_DIR ?? process.argv[3] ?? path.join(here, "..", ".."));

// The keyword engine's model name (engine/keyword/keyword_engine.hpp); the SDK asks for its own default,
// `jev-latest`, which the config below makes an alias of it.
const SERVED_MODEL = "baton-keyword-1";
const SDK_DEFAULT_MODEL = "jev-latest";

// The SDK reads TYPESAFE_API_KEY, TYPESAFE_BASE_URL, TYPESAFE_DEFAULT_MODEL and
// TYPESAFE_LOG_LEVEL when an option is not given; the tests rely on its own defaults.
for (const name of Object.keys(process.env)) if (name.startsWith("TYPESAFE_")) delete process.env[name];

// Keys of 32 hex characters (the server wants at least 16), new for every run.
const agentKey = `sdk-agent-${randomBytes(16).toString("hex")}`;
const limitedKey = `sdk-limited-${randomBytes(16).toString("hex")}`;

let server; // baton serve
let baseURL;
let tmp;
const tracked = trackedTests(test);
const serverTest = tracked.test; // a failure also prints the server's log lines (in `after`)

const STARTUP_MS = 10_000;
const STOP_MS = 10_000;

before(async () => {
  assert.ok(batonBin, "set BATON_BIN (or pass the baton binary as the first argument)");
  tmp = await mkdtemp(path.join(tmpdir(), "baton-sdk-"));
  const configPath = path.join(tmp, "baton.yaml");
  // JSON strings are YAML double-quoted scalars: any path is written safely.
  const q = (s) => JSON.stringify(s);
  await writeFile(
    configPath,
    [
      "server:",
      "  listen: 127.0.0.1:0",
      "auth:",
      "  keys:",
      "    - name: sdk-agent",
      "      role: agent",
      "      env: SDK_AGENT_KEY",
      "    - name: sdk-limited",
      "      role: agent",
      "      env: SDK_LIMITED_KEY",
      "      requests_per_second: 1",
      "      burst: 1",
      "systemone:",
      `  model_aliases: [${SDK_DEFAULT_MODEL}]`,
      "engine: {name: keyword}",
      `registry: ${q(path.join(sourceDir, "config", "tools.yaml"))}`,
      `policy: ${q(path.join(sourceDir, "config", "policy.yaml"))}`,
      `log: {path: ${q(path.join(tmp, "decisions.db"))}}`,
      "",
    ].join("\n"),
  );
  server = new baton_process(batonBin);
  baseURL = await server.start(configPath, { SDK_AGENT_KEY: agentKey, SDK_LIMITED_KEY: limitedKey }, STARTUP_MS);
});

after(async () => {
  try {
    await server?.stopChecked(STOP_MS, { listened: Boolean(baseURL), anyFailed: tracked.failed });
  } finally {
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }
});

// A fetch for the SDK's documented `fetch` option that records every attempt: what was sent
// (headers, body, when) and what came back (status, headers, when).
function recordingFetch(seen) {
  return async (url, init = {}) => {
    const entry = {
      url,
      method: init.method,
      headers: new Headers(init.headers),
      body: typeof init.body === "string" ? JSON.parse(init.body) : undefined,
      sentAt: performance.now(),
    };
    seen.push(entry);
    const res = await globalThis.fetch(url, init);
    entry.status = res.status;
    entry.responseHeaders = res.headers;
    entry.receivedAt = performance.now();
    return res;
  };
}

function client(apiKey, seen) {
  return new TypeSafeClient({ apiKey, baseURL, ...(seen ? { fetch: recordingFetch(seen) } : {}) });
}

// The server's delay, read as the SDK reads it: retry-after-ms first, then Retry-After seconds.
function advertisedDelayMs(headers) {
  if (headers.has("retry-after-ms")) return Number(headers.get("retry-after-ms"));
  return Number(headers.get("retry-after")) * 1000;
}

function assertProbabilities(probabilities, keys, what) {
  assert.deepEqual(Object.keys(probabilities).sort(), [...keys].sort(), `${what}: probability keys`);
  let sum = 0;
  for (const [k, p] of Object.entries(probabilities)) {
    assert.equal(typeof p, "number", `${what}: probability of ${k}`);
    assert.ok(p >= 0 && p <= 1, `${what}: probability of ${k} is ${p}`);
    sum += p;
  }
  assert.ok(Math.abs(sum - 1) <= 0.01, `${what}: probabilities sum to ${sum}`);
}

// The keyword engine scores word overlap between the state and each option's label and
// description: this state shares "billing", "invoice", "charged", "refund" and "payment" with
// the billing option and no word with the others.
const CATEGORY = {
  billing: "billing: an invoice charged twice, a refund, a payment",
  technical: "the app crashes or shows an error message",
  shipping: "a parcel delivery that is late, lost or damaged",
};
const STATE = "Billing problem: my invoice was charged twice, please refund the second payment.";
const URGENCY = ["no urgency", "somewhat urgent", "very urgent, needs an answer today"];

serverTest("systemOne answers choice, score and noul in one call", async () => {
  const seen = [];
  const { data, requestId, response } = await client(agentKey, seen)
    .systemOne({
      state: STATE,
      questions: {
        category: choice("What is this ticket about?", CATEGORY),
        urgency: score("How urgent is it?", URGENCY),
        refund: noul("Does the customer ask for money back?"),
      },
    })
    .withResponse();

  assert.equal(response.status, 200);
  assert.equal(seen.length, 1, "one attempt");
  assert.equal(seen[0].method, "POST");
  assert.equal(new URL(seen[0].url).pathname, "/v1/systemone");
  assert.equal(seen[0].body.model, SDK_DEFAULT_MODEL, "the SDK asked for its default model");
  assert.equal(typeof requestId, "string", "x-typesafe-request-id header");
  assert.ok(requestId.length > 0, "x-typesafe-request-id is not empty");

  assert.equal(typeof data.model, "string");
  assert.ok(data.model.length > 0);
  assert.equal(data.model, SERVED_MODEL, "the alias is answered by the served model");
  assert.deepEqual(Object.keys(data.answers).sort(), ["category", "refund", "urgency"]);

  const category = data.answers.category;
  assert.equal(category.type, "choice");
  assert.ok(Object.hasOwn(CATEGORY, category.choice), `choice ${category.choice} is a criteria label`);
  assert.equal(category.choice, "billing", "the label whose words the state shares");
  assertProbabilities(category.probabilities, Object.keys(CATEGORY), "category");
  for (const label of Object.keys(CATEGORY))
    if (label !== "billing") assert.ok(category.probabilities.billing > category.probabilities[label]);
  assert.equal(typeof category.confidence, "number");
  assert.ok(category.confidence >= 0 && category.confidence <= 1, `confidence ${category.confidence}`);

  const levels = URGENCY.map((_, i) => String(i));
  const urgency = data.answers.urgency;
  assert.equal(urgency.type, "score");
  assert.equal(typeof urgency.score, "number");
  assert.ok(urgency.score >= 0 && urgency.score <= URGENCY.length - 1, `score ${urgency.score}`);
  assert.deepEqual(urgency.legend, Object.fromEntries(URGENCY.map((d, i) => [String(i), d])));
  assertProbabilities(urgency.probabilities, levels, "urgency");
  const expected = levels.reduce((s, k) => s + Number(k) * urgency.probabilities[k], 0);
  assert.ok(Math.abs(urgency.score - expected) <= 0.01, `score ${urgency.score} is the expected level ${expected}`);
  assert.equal(typeof urgency.confidence, "number");
  assert.ok(urgency.confidence >= 0 && urgency.confidence <= 1, `confidence ${urgency.confidence}`);

  const refund = data.answers.refund;
  assert.equal(refund.type, "noul");
  assert.equal(typeof refund.noul, "number");
  assert.ok(refund.noul >= 0 && refund.noul <= 1, `noul ${refund.noul}`);
  assert.ok(!Object.hasOwn(refund, "confidence"), "a noul answer has no confidence");

  assert.ok(Number.isInteger(data.usage.input_tokens) && data.usage.input_tokens >= 0, `input_tokens ${data.usage.input_tokens}`);
  assert.equal(data.usage.output_tokens, 0);
});

serverTest("models.list names the served model and its alias", async () => {
  const models = await client(agentKey).models.list();
  assert.ok(Array.isArray(models));
  for (const name of [SERVED_MODEL, SDK_DEFAULT_MODEL]) {
    const card = models.find((m) => m.name === name);
    assert.ok(card, `${name} in ${JSON.stringify(models)}`);
    assert.equal(typeof card.description, "string", `${name}.description`);
    assert.match(card.release_date, /^\d{4}-\d{2}-\d{2}$/, `${name}.release_date`);
  }
});

serverTest("a request the server refuses is an UnprocessableEntityError", async () => {
  const seen = [];
  await assert.rejects(
    client(agentKey, seen).systemOne({
      state: STATE,
      // The SDK checks score lists locally but not how many labels a choice has.
      questions: { single: choice("Which one?", { only: "the one label" }) },
    }),
    (err) => {
      assert.ok(err instanceof UnprocessableEntityError, `${err?.name}: ${err?.message}`);
      assert.equal(err.status, 422);
      assert.ok(err.message.startsWith("422 "), err.message);
      assert.ok(err.message.includes("questions.single.choice.criteria"), err.message);
      assert.equal(err.body?.code, "INVALID_REQUEST");
      return true;
    },
  );
  assert.equal(seen.length, 1, "a 422 is not retried");
});

serverTest("a wrong key is an AuthenticationError and is not retried", async () => {
  const seen = [];
  await assert.rejects(
    client(`wrong-${randomBytes(16).toString("hex")}`, seen).systemOne({
      state: STATE,
      questions: { refund: noul("Does the customer ask for money back?") },
    }),
    (err) => {
      assert.ok(err instanceof AuthenticationError, `${err?.name}: ${err?.message}`);
      assert.equal(err.status, 401);
      assert.match(err.headers.get("www-authenticate") ?? "", /^Bearer\b/);
      return true;
    },
  );
  assert.deepEqual(
    seen.map((s) => s.status),
    [401],
    "one attempt",
  );
  assert.equal(seen[0].headers.get("authorization")?.startsWith("Bearer wrong-"), true);
});

serverTest("a rate-limited key is retried after the server's delay", async () => {
  const seen = [];
  const limited = client(limitedKey, seen);
  const request = {
    state: STATE,
    questions: { category: choice("What is this ticket about?", CATEGORY) },
  };
  const first = await limited.systemOne(request);
  assert.equal(first.answers.category.choice, "billing");
  const second = await limited.systemOne(request);
  assert.equal(second.answers.category.choice, "billing");

  assert.deepEqual(
    seen.map((s) => s.status),
    [200, 429, 200],
  );
  const [, refused, retry] = seen;
  assert.equal(refused.headers.get("x-typesafe-retry-count"), null, "a first attempt carries no retry count");
  assert.equal(retry.headers.get("x-typesafe-retry-count"), "1");
  assert.match(refused.responseHeaders.get("retry-after") ?? "", /^\d+$/, "Retry-After in whole seconds");
  assert.match(refused.responseHeaders.get("retry-after-ms") ?? "", /^\d+$/, "retry-after-ms");
  const delay = advertisedDelayMs(refused.responseHeaders);
  assert.ok(delay > 0 && delay <= 1000, `advertised delay ${delay} ms at 1 request/s`);
  const waited = retry.sentAt - refused.receivedAt;
  assert.ok(waited >= delay - 50, `retried after ${waited.toFixed(0)} ms, advertised ${delay} ms`);

  // The bucket is empty again: without retries the 429 reaches the caller.
  await assert.rejects(limited.systemOne(request, { retry: { maxRetries: 0 } }), (err) => {
    assert.ok(err instanceof RateLimitError, `${err?.name}: ${err?.message}`);
    assert.equal(err.status, 429);
    assert.equal(err.body?.code, "RATE_LIMITED");
    assert.ok(err.retryAfterMs > 0 && err.retryAfterMs <= 1000, `retryAfterMs ${err.retryAfterMs}`);
    return true;
  });
  assert.equal(seen.length, 4);
});

serverTest("an unknown model is a NotFoundError", async () => {
  const seen = [];
  await assert.rejects(
    client(agentKey, seen).systemOne({
      model: "no-such-model",
      state: STATE,
      questions: { refund: noul("Does the customer ask for money back?") },
    }),
    (err) => {
      assert.ok(err instanceof NotFoundError, `${err?.name}: ${err?.message}`);
      assert.equal(err.status, 404);
      assert.equal(err.body?.code, "MODEL_NOT_FOUND");
      return true;
    },
  );
  assert.equal(seen.length, 1, "a 404 is not retried");
  assert.equal(seen[0].body.model, "no-such-model");
});
