// The reviewer inbox (docs/escalations.md): the pending escalations from
// GET /v1/escalations?status=pending, kept current by the /v1/review WebSocket, resolved with
// POST /v1/escalations/{id}/resolve. Server data is written with textContent only.
"use strict";

const KEY_STORE = "baton.inbox.key";
const RESOLVED_SHOWN = 20;
const BACKOFF_MIN_MS = 1000;
const BACKOFF_MAX_MS = 30000;
const NEEDS = "a key with role reviewer (or admin)";

const $ = (selector, root = document) => root.querySelector(selector);

const pending = new Map(); // escalation id → card entry (see make_card)
let tools = new Map(); // tool id → {id, parameters, …} from GET /v1/tools
let key = "";
// Whether the server has API keys, as the server says (null until it has): a keyless server
// takes any Authorization header, so a key the page holds proves nothing either way.
let keyless = null;
let socket = null;
// Bumped by every connect and stop: events of an older socket or request are ignored.
let generation = 0;
let snapshot_seen = false; // a snapshot is newer than any GET still in flight
let backoff_ms = BACKOFF_MIN_MS;
let retry_timer = null;
let retry_at = 0;

// The key lives in sessionStorage only: this tab, until it is closed; never in a URL. Storage
// may be unavailable (private windows, file policies): the key then lasts for the page.
function stored_key() {
  try {
    // An older inbox kept the key in localStorage, on disk for ever: it is taken out.
    localStorage.removeItem(KEY_STORE);
  } catch {
    // nothing kept there
  }
  try {
    return sessionStorage.getItem(KEY_STORE) ?? "";
  } catch {
    return "";
  }
}

function store_key(value) {
  try {
    if (value) sessionStorage.setItem(KEY_STORE, value);
    else sessionStorage.removeItem(KEY_STORE);
  } catch {
    // kept in memory only
  }
}

// `#key=…` (a bookmark) wins over the remembered key. The fragment never reaches the server, and
// it is taken out of the address bar, but the browser's history keeps the URL it was opened with:
// the key form is the way in that leaves no key in any URL (docs/escalations.md).
// Null when the fragment names no key.
function fragment_key() {
  const match = /(?:^#|&)key=([^&]*)/.exec(location.hash);
  if (!match) return null;
  history.replaceState(null, "", location.pathname + location.search);
  try {
    const value = decodeURIComponent(match[1]).trim();
    return value || null;
  } catch {
    return null;
  }
}

// The key the page holds, in its field and the tab's storage.
function set_key(value) {
  key = value;
  $("#api-key").value = value;
  store_key(value);
}

function use_key(value) {
  set_key(value);
  backoff_ms = BACKOFF_MIN_MS;
  show_notice("");
  connect();
}

// What the server asks of the reviewer: nothing (no API keys configured) or a reviewer key.
function show_auth(open) {
  const note = $("#auth-note");
  $("#key-form").hidden = open;
  note.hidden = !open;
  note.textContent = open ? "This server has no API keys: the inbox needs none (it answers this machine only)." : "";
}

function set_connection(state, text) {
  const el = $("#connection");
  el.dataset.state = state;
  el.textContent = text;
}

function show_notice(text) {
  const el = $("#notice");
  el.textContent = text;
  el.hidden = !text;
}

// One line for the server's error shape {"error", "code", "detail"}: the server words `error`
// from `detail`'s issues ("arguments.service: Field required"), so the message says it all.
function describe_error(status, body) {
  if (!body || typeof body !== "object") return `HTTP ${status}`;
  return `${status} ${body.code ?? ""}: ${body.error ?? ""}`.trim();
}

async function api(method, path, body, with_key = true) {
  // Without a key no Authorization is sent: a server without API keys needs none.
  const init = { method, headers: key && with_key ? { Authorization: `Bearer ${key}` } : {}, cache: "no-store" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data = null;
  try {
    data = await response.json();
  } catch {
    // not JSON: the status says enough
  }
  return { status: response.status, ok: response.ok, data };
}

// ---- connection ----------------------------------------------------------------------------

function connect() {
  const gen = ++generation;
  clearTimeout(retry_timer);
  retry_timer = null;
  if (socket) socket.close();
  socket = null;
  snapshot_seen = false;
  set_connection("connecting", "connecting…");
  // The socket opens once the list says the key (or no key) is accepted: a refused socket would
  // only retry for ever.
  load_pending(gen).then((ok) => {
    if (ok && gen === generation) open_socket(gen);
  });
}

// Stops for good (a refused key, a forgotten key) until the user connects again.
function stop(state, text) {
  generation++;
  clearTimeout(retry_timer);
  retry_timer = null;
  if (socket) socket.close();
  socket = null;
  set_connection(state, text);
}

// The pending list; true when it came (the key, or no key, is accepted).
async function load_pending(gen) {
  const path = "/v1/escalations?status=pending";
  let result;
  try {
    // Asked without a key until the server has said whether it has keys: 200 means none.
    if (keyless !== false || !key) {
      result = await api("GET", path, undefined, false);
      if (result.ok) keyless = true;
      else if (result.status === 401) keyless = false;
    }
    if (keyless === true && key) {
      // An old `#key=` link or the tab's key: not needed here, so not kept.
      set_key("");
    }
    if (keyless === false && key) result = await api("GET", path);
  } catch (err) {
    if (gen === generation) {
      show_notice(`cannot reach baton: ${err.message}`);
      schedule_reconnect();
    }
    return false;
  }
  if (gen !== generation) return false;
  if (result.status === 401 && !key) {
    show_auth(false);
    show_notice(`This server has API keys: enter ${NEEDS} above.`);
    stop("idle", "no key: enter a reviewer key");
    return false;
  }
  if (result.status === 401 || result.status === 403) {
    show_auth(false);
    show_notice(`The key was refused: ${describe_error(result.status, result.data)}. This page needs ${NEEDS}.`);
    stop("refused", "key refused");
    return false;
  }
  if (!result.ok) {
    show_notice(`Listing escalations failed: ${describe_error(result.status, result.data)}`);
    schedule_reconnect();
    return false;
  }
  show_auth(keyless === true);
  show_notice("");
  await load_tools(gen);
  if (gen !== generation) return false;
  if (!snapshot_seen) replace_all(result.data?.escalations ?? []);
  refresh_running(gen);
  return true;
}

// Resolved items whose tool was still running when the socket went away: their `tool_run` frame
// may have come while the page was not listening, so the escalation is read again.
async function refresh_running(gen) {
  for (const el of document.querySelectorAll('#resolved .tool-run[data-state="running"]')) {
    const id = el.closest("li").dataset.escalation;
    try {
      const result = await api("GET", `/v1/escalations/${encodeURIComponent(id)}`);
      const run = result.ok ? result.data?.resolution?.tool_run : null;
      if (gen === generation && run) paint_run(el, tool_run_text(null, run));
    } catch {
      // the next reconnect reads it again
    }
  }
}

// The registry's tools, for the argument fields; without them a resolve sends no arguments.
async function load_tools(gen) {
  try {
    const result = await api("GET", "/v1/tools");
    if (gen === generation && result.ok && Array.isArray(result.data?.tools)) {
      tools = new Map(result.data.tools.map((t) => [t.id, t]));
    }
  } catch {
    // the cards fall back to the proposal's arguments
  }
}

function open_socket(gen) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  let ws;
  try {
    // A browser cannot set headers on a WebSocket: the key travels as a subprotocol.
    ws = new WebSocket(`${scheme}//${location.host}/v1/review`, key ? ["baton.review", `bearer.${key}`] : ["baton.review"]);
  } catch (err) {
    show_notice(`This key cannot be sent on a WebSocket (${err.message}).`);
    stop("closed", "not connected");
    return;
  }
  socket = ws;
  ws.onopen = () => {
    if (gen !== generation) return;
    backoff_ms = BACKOFF_MIN_MS;
    set_connection("live", "live");
  };
  ws.onmessage = (event) => {
    if (gen === generation) on_frame(event.data);
  };
  ws.onclose = () => {
    if (gen !== generation) return;
    socket = null;
    schedule_reconnect();
  };
}

function schedule_reconnect() {
  if (retry_timer) return;
  // Jitter, so that many pages do not come back at the same instant after a restart.
  const delay = Math.round(backoff_ms * (0.8 + 0.4 * Math.random()));
  backoff_ms = Math.min(backoff_ms * 2, BACKOFF_MAX_MS);
  retry_at = Date.now() + delay;
  retry_timer = setTimeout(connect, delay);
  show_retry();
}

function show_retry() {
  const seconds = Math.max(0, Math.ceil((retry_at - Date.now()) / 1000));
  set_connection("reconnecting", `disconnected: retrying in ${seconds} s`);
}

function on_frame(text) {
  let frame;
  try {
    frame = JSON.parse(text);
  } catch {
    return;
  }
  switch (frame.type) {
    case "snapshot":
      snapshot_seen = true;
      replace_all(frame.escalations ?? []);
      break;
    case "escalation":
      if (frame.escalation) upsert(frame.escalation);
      break;
    case "resolved":
      if (frame.escalation) settle(frame.escalation, frame.escalation.resolution);
      break;
    case "tool_run":
      if (frame.escalation && frame.tool_run) show_tool_run(frame.escalation, frame.tool_run);
      break;
    case "error":
      show_notice(`The review socket says: ${describe_error("", frame)}`);
      break;
  }
}

// ---- the list ------------------------------------------------------------------------------

// The pending list becomes `list`; cards still pending keep what the reviewer typed.
function replace_all(list) {
  const ids = new Set(list.map((e) => e.id));
  for (const [id, entry] of pending) {
    if (!ids.has(id)) {
      entry.card.remove();
      pending.delete(id);
    }
  }
  for (const escalation of list) upsert(escalation);
  update_counts();
}

function upsert(escalation) {
  if (escalation.status && escalation.status !== "pending") {
    settle(escalation, escalation.resolution);
    return;
  }
  if (pending.has(escalation.id)) return;
  const entry = make_card(escalation);
  pending.set(escalation.id, entry);
  // Oldest first, as the API lists them.
  const later = [...pending.values()].find(
    (e) => e !== entry && e.card.isConnected && e.escalation.created_ms > escalation.created_ms,
  );
  $("#pending").insertBefore(entry.card, later ? later.card : null);
  tick();
  update_counts();
}

// Takes a resolved escalation off the pending list and names who resolved it below.
function settle(escalation, resolution) {
  const entry = pending.get(escalation.id);
  if (entry) {
    entry.card.remove();
    pending.delete(escalation.id);
  }
  const known = entry ? entry.escalation : escalation;
  const list = $("#resolved");
  if (!resolved_li(escalation.id)) {
    list.prepend(resolved_item(known, resolution));
    while (list.children.length > RESOLVED_SHOWN) list.lastElementChild.remove();
  }
  update_counts();
}

function resolution_text(resolution) {
  if (!resolution) return { who: "someone", what: "resolved" };
  const who = resolution.by === "deadline" ? `${resolution.reviewer} (deadline)` : resolution.reviewer;
  const what = resolution.outcome === "execute" ? `ran ${resolution.tool}` : "denied";
  return { who, what };
}

// How the tool of an execute went: baton's own run (http, command), or the agent's to do.
function tool_run_text(resolution, run) {
  if (run) {
    if (run.ok) return { state: "ok", text: `${run.tool}: ok` };
    return { state: "failed", text: `${run.tool}: failed with ${run.error_code}${run.detail ? ` (${run.detail})` : ""}` };
  }
  if (resolution?.outcome !== "execute") return null;
  if (resolution.executor === "http" || resolution.executor === "command") {
    return { state: "running", text: `${resolution.tool}: running…` };
  }
  if (resolution.executor === "agent") return { state: "agent", text: `${resolution.tool}: the agent runs it` };
  return null;
}

// A resolved item's line about its tool run: hidden when there is nothing to say.
function paint_run(el, shown) {
  el.hidden = !shown;
  if (!shown) return;
  el.dataset.state = shown.state;
  el.textContent = shown.text;
}

function resolved_li(escalation_id) {
  return [...$("#resolved").children].find((li) => li.dataset.escalation === escalation_id);
}

// The socket sends `tool_run` after the `resolved` frame that lists the item.
function show_tool_run(escalation_id, run) {
  const li = resolved_li(escalation_id);
  if (li) paint_run($(".tool-run", li), tool_run_text(null, run));
}

function resolved_item(escalation, resolution) {
  const li = document.createElement("li");
  li.dataset.escalation = escalation.id;
  const { who, what } = resolution_text(resolution);
  const reviewer = document.createElement("strong");
  reviewer.className = "reviewer";
  reviewer.textContent = who;
  const where = document.createElement("span");
  where.className = "where";
  where.textContent = `${escalation.session ?? escalation.id} · turn ${escalation.turn ?? "?"}`;
  li.append(reviewer, ` ${what} — `, where);
  if (resolution?.reason) {
    const reason = document.createElement("q");
    reason.textContent = resolution.reason;
    li.append(" ", reason);
  }
  if (resolution?.created_at) {
    const at = document.createElement("time");
    at.dateTime = resolution.created_at;
    at.textContent = utc_time(resolution.created_ms ?? Date.parse(resolution.created_at));
    li.append(" ", at);
  }
  const run = document.createElement("span");
  run.className = "tool-run";
  paint_run(run, tool_run_text(resolution, resolution?.tool_run));
  li.append(" ", run);
  return li;
}

function update_counts() {
  const n = pending.size;
  $("#pending-count").textContent = String(n);
  $("#empty").hidden = n > 0;
  $("#resolved-section").hidden = $("#resolved").children.length === 0;
  document.title = n ? `(${n}) baton · reviewer inbox` : "baton · reviewer inbox";
}

// ---- one card ------------------------------------------------------------------------------

function percent(p) {
  return `${(Math.max(0, Math.min(1, Number(p) || 0)) * 100).toFixed(1)}%`;
}

// What an event says: its text, else its content, output or remaining fields as JSON.
function event_body(event) {
  let value = event;
  if (event !== null && typeof event === "object") {
    const { role, tool, ...rest } = event;
    value = event.content ?? event.output ?? rest;
  }
  return typeof value === "string" ? { text: value, json: false } : { text: JSON.stringify(value, null, 2), json: true };
}

function fill_state(list, state) {
  const events = Array.isArray(state) ? state : [];
  if (!events.length) {
    const li = document.createElement("li");
    li.className = "event none";
    li.textContent = "no history was kept";
    list.append(li);
    return;
  }
  for (const event of events) {
    const li = document.createElement("li");
    li.className = "event";
    const role = String(event?.role ?? event?.type ?? "event");
    li.dataset.role = role;
    const label = document.createElement("span");
    label.className = "role";
    label.textContent = event?.tool ? `${role} · ${event.tool}` : role;
    const body = document.createElement("span");
    const { text, json } = event_body(event);
    body.className = json ? "content json" : "content";
    body.textContent = text;
    li.append(label, body);
    list.append(li);
  }
}

// `proposed` is null for a flat tie: no bar is marked as if the model had chosen it.
function fill_chart(list, candidates, proposed) {
  for (const candidate of candidates) {
    const li = document.createElement("li");
    li.className = "bar-row";
    if (proposed && candidate.tool === proposed) li.classList.add("proposed");
    const name = document.createElement("span");
    name.className = "bar-label";
    const tool = document.createElement("span");
    tool.className = "bar-tool";
    tool.textContent = candidate.tool;
    name.append(tool);
    if (candidate.description) {
      name.title = candidate.description;
      const description = document.createElement("span");
      description.className = "bar-description";
      description.textContent = candidate.description;
      name.append(description);
    }
    const track = document.createElement("span");
    track.className = "bar-track";
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.dataset.tool = candidate.tool;
    bar.dataset.probability = String(candidate.probability);
    bar.style.width = percent(candidate.probability);
    track.append(bar);
    const value = document.createElement("span");
    value.className = "pct";
    value.textContent = percent(candidate.probability);
    li.append(name, track, value);
    list.append(li);
  }
}

// One answer in words: "needs_person (Does this need a person?): P(true) 0.12".
function answer_text(a) {
  const what = a.instructions ? `${a.question} (${a.instructions})` : a.question;
  if (a.type === "noul") return `${what}: P(true) ${a.p_true}`;
  if (a.type === "score") return `${what}: scored ${a.score}${a.level !== undefined ? ` (${a.level})` : ""}`;
  if (a.type === "choice") return `${what}: ${a.choice} (confidence ${a.confidence})`;
  return what;
}

function fill_evidence(card, escalation) {
  const evidence = escalation.evidence ?? {};
  $(".why", card).textContent = evidence.why || escalation.reason;
  const list = $(".answers", card);
  const fired = evidence.inputs?.question;
  for (const a of Array.isArray(evidence.answers) ? evidence.answers : []) {
    const li = document.createElement("li");
    li.dataset.question = a.question;
    if (a.question === fired) li.classList.add("fired");
    li.textContent = answer_text(a);
    list.append(li);
  }
  list.hidden = list.children.length === 0;
  const raised = $(".raised-at", card);
  raised.dateTime = escalation.created_at;
  raised.textContent = utc_time(escalation.created_ms, true);
  $(".decision-id", card).textContent = escalation.decision;
}

// One field per parameter of `tool_id`, typed from the registry and prefilled from the proposal
// when it is the proposed tool.
function fill_arguments(entry) {
  const fieldset = $(".arguments", entry.card);
  const fields = $(".fields", fieldset);
  fields.replaceChildren();
  entry.inputs = new Map();
  const tool = tools.get(entry.select.value);
  const proposed = entry.select.value === entry.escalation.tool ? entry.escalation.arguments ?? {} : {};
  const parameters = tool?.parameters ?? [];
  for (const p of parameters) {
    const label = document.createElement("label");
    label.className = `argument ${p.type}`;
    label.dataset.parameter = p.name;
    const name = document.createElement("span");
    name.className = "argument-name";
    name.textContent = p.name;
    if (p.instructions) label.title = p.instructions;
    let input;
    if (p.type === "choice") {
      input = document.createElement("select");
      input.append(new Option("choose…", "", true, false));
      for (const v of p.values ?? []) input.append(new Option(v.description ? `${v.value} — ${v.description}` : v.value, v.value));
      input.value = typeof proposed[p.name] === "string" ? proposed[p.name] : "";
    } else if (p.type === "boolean") {
      input = document.createElement("input");
      input.type = "checkbox";
      input.checked = proposed[p.name] === true;
    } else {
      input = document.createElement("input");
      input.type = "text";
      input.spellcheck = false;
      if (p.fixed != null) {
        input.value = p.fixed;
        input.readOnly = true;
        label.title = "fixed by the registry";
      } else if (typeof proposed[p.name] === "string") {
        input.value = proposed[p.name];
      }
    }
    input.className = "argument-input";
    input.addEventListener("input", () => label.classList.remove("invalid"));
    label.append(name, input);
    fields.append(label);
    entry.inputs.set(p.name, { parameter: p, input, label });
  }
  fieldset.hidden = parameters.length === 0;
}

// The arguments as edited; null when the registry's tools are not known (the server then takes
// the proposal's). An unchosen choice or an empty text is left out: the server says what it needs.
function edited_arguments(entry) {
  if (!tools.has(entry.select.value)) return null;
  const args = {};
  for (const [name, { parameter, input }] of entry.inputs) {
    if (parameter.type === "boolean") args[name] = input.checked;
    else if (parameter.type === "choice") {
      if (input.value) args[name] = input.value;
    } else if (parameter.fixed == null) {
      if (input.value !== "") args[name] = input.value;
    }
  }
  return args;
}

function make_card(escalation) {
  const card = $("#card-template").content.firstElementChild.cloneNode(true);
  const q = (selector) => $(selector, card);
  card.dataset.escalation = escalation.id;
  q(".session").textContent = escalation.session;
  q(".turn").textContent = String(escalation.turn);
  q(".reason-badge").textContent = escalation.reason;
  // The confidence as the bars show it, a percentage (the API's `question` has the raw number).
  q(".question").textContent = escalation.tool
    ? `Should ${escalation.tool} run? It was escalated by ${escalation.reason} at confidence ${percent(escalation.confidence)}.`
    : escalation.question;

  const deadline = q(".deadline");
  deadline.dataset.deadlineMs = String(escalation.deadline_ms);
  deadline.dataset.createdMs = String(escalation.created_ms);
  deadline.dataset.outcome = escalation.on_deadline === "execute" && escalation.tool ? `${escalation.tool} runs` : "denied";
  deadline.dateTime = escalation.deadline_at;
  deadline.title = `deadline ${new Date(escalation.deadline_ms).toLocaleString()} (your time)`;

  fill_evidence(card, escalation);
  fill_state(q(".state"), escalation.state);
  const candidates = Array.isArray(escalation.candidates) ? escalation.candidates : [];
  const tie = escalation.evidence?.tie === true;
  fill_chart(q(".chart"), candidates, tie ? null : escalation.tool);
  if (tie) {
    const top = candidates.filter((c) => c.probability === candidates[0]?.probability).map((c) => c.tool);
    const note = q(".tie-note");
    note.textContent = `A flat tie: the model prefers none of ${top.join(", ")}; ${escalation.tool} is proposed only because it comes first.`;
    note.hidden = false;
  }
  q(".proposed-tool").textContent = escalation.tool ? `${escalation.tool}${tie ? " (tie)" : ""}` : "none (engine failure)";
  q(".proposed-arguments").textContent = escalation.tool ? JSON.stringify(escalation.arguments ?? {}) : "";

  const select = q("select.tool");
  // `finish` is the registry's "nothing more to do" option, not a tool that can run.
  const choices = candidates.map((c) => c.tool).filter((tool) => tool !== "finish");
  for (const tool of tools.keys()) if (!choices.includes(tool)) choices.push(tool);
  if (escalation.tool && !choices.includes(escalation.tool)) choices.unshift(escalation.tool);
  for (const tool of choices) select.append(new Option(tool, tool, false, tool === escalation.tool));

  const entry = {
    escalation,
    card,
    busy: false,
    inputs: new Map(),
    reason: q("textarea.reason"),
    select,
    force: q("input.force"),
    resolve: q("button.resolve"),
    deny: q("button.deny"),
    error: q(".error"),
  };
  fill_arguments(entry);
  entry.reason.addEventListener("input", () => refresh_buttons(entry));
  select.addEventListener("change", () => {
    fill_arguments(entry);
    show_card_error(entry, "");
    refresh_buttons(entry);
  });
  q(".resolve-form").addEventListener("submit", (event) => {
    event.preventDefault();
    resolve(entry, "execute");
  });
  entry.deny.addEventListener("click", () => resolve(entry, "deny"));
  refresh_buttons(entry);
  // The newest event is the one the question is about.
  requestAnimationFrame(() => {
    const state = q(".state");
    state.scrollTop = state.scrollHeight;
  });
  return entry;
}

function refresh_buttons(entry) {
  const blank = entry.reason.value.trim() === "";
  const done = entry.card.classList.contains("resolved");
  entry.resolve.textContent = entry.select.value ? `Resolve: run ${entry.select.value}` : "Resolve: no tool";
  entry.resolve.disabled = blank || entry.busy || done || !entry.select.value;
  entry.deny.disabled = blank || entry.busy || done;
}

function show_card_error(entry, text) {
  entry.error.textContent = text;
  entry.error.hidden = !text;
}

async function resolve(entry, outcome) {
  if (entry.busy) return;
  const body = { outcome, reason: entry.reason.value.trim() };
  if (outcome === "execute") {
    body.tool = entry.select.value;
    // Unknown tools (GET /v1/tools failed): no arguments, the server takes the proposal's.
    const args = edited_arguments(entry);
    if (args) body.arguments = args;
  }
  if (entry.force.checked) body.force = true;
  entry.busy = true;
  refresh_buttons(entry);
  show_card_error(entry, "");
  const id = entry.escalation.id;
  let result;
  try {
    result = await api("POST", `/v1/escalations/${encodeURIComponent(id)}/resolve`, body);
  } catch (err) {
    result = { status: 0, ok: false, data: { error: `cannot reach baton: ${err.message}` } };
  }
  entry.busy = false;
  if (result.ok) {
    settle(entry.escalation, result.data);
    return;
  }
  const code = result.data?.code;
  show_card_error(entry, describe_error(result.status, result.data));
  if (code === "ALREADY_RESOLVED") {
    // Someone was faster (and the socket has not told us yet): the message says who and how; the
    // card is locked.
    entry.card.classList.add("resolved");
  } else {
    if (code === "VERSION_CHANGED") $(".force-label", entry.card).hidden = false;
    // The fields the refusal names in its issues' `loc` (["arguments", NAME]), marked where they are.
    const named = new Set();
    for (const d of Array.isArray(result.data?.detail) ? result.data.detail : []) {
      if (Array.isArray(d?.loc) && d.loc.length === 2 && d.loc[0] === "arguments") named.add(String(d.loc[1]));
    }
    for (const [name, { label }] of entry.inputs) label.classList.toggle("invalid", named.has(name));
  }
  refresh_buttons(entry);
}

// ---- clocks ----------------------------------------------------------------------------------

const pad = (n) => String(n).padStart(2, "0");

// "14:34 UTC", with the date when it is not today's (UTC).
function utc_time(ms, seconds = false) {
  const d = new Date(ms);
  const today = new Date().toISOString().slice(0, 10);
  const day = d.toISOString().slice(0, 10);
  const time = `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}${seconds ? `:${pad(d.getUTCSeconds())}` : ""}`;
  return `${day === today ? "" : `${day} `}${time} UTC`;
}

// "12 min", "2 h 5 min", "45 s".
function span_text(ms) {
  const s = Math.floor(Math.abs(ms) / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function tick() {
  const now = Date.now();
  for (const el of document.querySelectorAll(".deadline[data-deadline-ms]")) {
    const at = Number(el.dataset.deadlineMs);
    const left = at - now;
    const when = utc_time(at);
    el.textContent =
      left >= 0
        ? `${el.dataset.outcome} at ${when} if nobody decides (in ${span_text(left)})`
        : `overdue: ${el.dataset.outcome} at ${when} (${span_text(left)} ago)`;
    el.classList.toggle("soon", left >= 0 && left < 60000);
    const card = el.closest(".card");
    card.classList.toggle("overdue", left < 0);
    $(".age", card).textContent = `${span_text(now - Number(el.dataset.createdMs))} ago`;
  }
  if (retry_timer) show_retry();
}

// ---- start ---------------------------------------------------------------------------------

function start() {
  $("#key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    use_key($("#api-key").value.trim());
  });
  $("#forget-key").addEventListener("click", () => {
    replace_all([]);
    use_key("");
  });
  // A link to `#key=…` followed from the open page changes only the fragment: no new load.
  window.addEventListener("hashchange", () => {
    const value = fragment_key();
    if (value !== null) use_key(value);
  });
  update_counts();
  setInterval(tick, 1000);
  use_key(fragment_key() ?? stored_key());
}

start();
