// The reviewer inbox (docs/escalations.md): the pending escalations from
// GET /v1/escalations?status=pending, kept current by the /v1/review WebSocket, resolved with
// POST /v1/escalations/{id}/resolve. Server data is written with textContent only.
"use strict";

const KEY_STORE = "baton.inbox.key";
const RESOLVED_SHOWN = 20;
const BACKOFF_MIN_MS = 1000;
const BACKOFF_MAX_MS = 30000;

const $ = (selector, root = document) => root.querySelector(selector);

const pending = new Map(); // escalation id → card entry (see make_card)
let key = "";
let socket = null;
// Bumped by every connect and stop: events of an older socket or request are ignored.
let generation = 0;
let snapshot_seen = false; // a snapshot is newer than any GET still in flight
let backoff_ms = BACKOFF_MIN_MS;
let retry_timer = null;
let retry_at = 0;

// Storage may be unavailable (private windows, file policies): the key then lasts for the page.
function stored_key() {
  try {
    return localStorage.getItem(KEY_STORE) ?? "";
  } catch {
    return "";
  }
}

function store_key(value) {
  try {
    if (value) localStorage.setItem(KEY_STORE, value);
    else localStorage.removeItem(KEY_STORE);
  } catch {
    // kept in memory only
  }
}

// `#key=…` (a bookmark, a test) wins over the remembered key. The fragment never reaches the
// server; it is also taken out of the address bar so it is not shown or shared by accident.
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

function use_key(value) {
  key = value;
  $("#api-key").value = value;
  store_key(value);
  backoff_ms = BACKOFF_MIN_MS;
  show_notice("");
  connect();
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

// One line for the server's error shape {"error", "code", "detail"}.
function describe_error(status, body) {
  if (!body || typeof body !== "object") return `HTTP ${status}`;
  let text = `${status} ${body.code ?? ""}: ${body.error ?? ""}`.trim();
  if (Array.isArray(body.detail)) {
    const issues = body.detail.map((d) => (d && typeof d === "object" ? d.msg ?? JSON.stringify(d) : String(d)));
    if (issues.length) text += ` (${issues.join("; ")})`;
  } else if (typeof body.detail === "string" && body.detail) {
    text += ` (${body.detail})`;
  }
  return text;
}

async function api(method, path, body) {
  const init = { method, headers: { Authorization: `Bearer ${key}` }, cache: "no-store" };
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
  if (!key) {
    set_connection("idle", "no key: enter a reviewer key");
    return;
  }
  set_connection("connecting", "connecting…");
  load_pending(gen);
  open_socket(gen);
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

async function load_pending(gen) {
  let result;
  try {
    result = await api("GET", "/v1/escalations?status=pending");
  } catch (err) {
    if (gen === generation) show_notice(`cannot reach baton: ${err.message}`);
    return;
  }
  if (gen !== generation) return;
  if (result.status === 401 || result.status === 403) {
    show_notice(`The key was refused: ${describe_error(result.status, result.data)}`);
    stop("refused", "key refused");
    return;
  }
  if (!result.ok) {
    show_notice(`Listing escalations failed: ${describe_error(result.status, result.data)}`);
    return;
  }
  show_notice("");
  if (!snapshot_seen) replace_all(result.data?.escalations ?? []);
}

function open_socket(gen) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  let ws;
  try {
    // A browser cannot set headers on a WebSocket: the key travels as a subprotocol.
    ws = new WebSocket(`${scheme}//${location.host}/v1/review`, ["baton.review", `bearer.${key}`]);
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
  if (![...list.children].some((li) => li.dataset.escalation === escalation.id)) {
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
    at.textContent = new Date(resolution.created_ms ?? resolution.created_at).toLocaleTimeString();
    li.append(" ", at);
  }
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

function fill_chart(list, candidates, proposed) {
  for (const candidate of candidates) {
    const li = document.createElement("li");
    li.className = "bar-row";
    if (candidate.tool === proposed) li.classList.add("proposed");
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

function make_card(escalation) {
  const card = $("#card-template").content.firstElementChild.cloneNode(true);
  const q = (selector) => $(selector, card);
  card.dataset.escalation = escalation.id;
  q(".session").textContent = escalation.session;
  q(".turn").textContent = String(escalation.turn);
  q(".reason-badge").textContent = escalation.reason;
  q(".question").textContent = escalation.question;

  const countdown = q(".countdown");
  countdown.dataset.deadlineMs = String(escalation.deadline_ms);
  countdown.dateTime = escalation.deadline_at;
  countdown.title = `deadline ${new Date(escalation.deadline_ms).toLocaleString()}`;
  q(".on-deadline").textContent = `then ${escalation.on_deadline}`;

  fill_state(q(".state"), escalation.state);
  const candidates = Array.isArray(escalation.candidates) ? escalation.candidates : [];
  fill_chart(q(".chart"), candidates, escalation.tool);
  q(".proposed-tool").textContent = escalation.tool ?? "none (engine failure)";
  q(".proposed-arguments").textContent = escalation.tool ? JSON.stringify(escalation.arguments ?? {}) : "";

  const select = q("select.tool");
  // `finish` is the registry's "nothing more to do" option, not a tool that can run.
  const tools = candidates.map((c) => c.tool).filter((tool) => tool !== "finish");
  if (escalation.tool && !tools.includes(escalation.tool)) tools.unshift(escalation.tool);
  for (const tool of tools) select.append(new Option(tool, tool, false, tool === escalation.tool));

  const entry = {
    escalation,
    card,
    busy: false,
    reason: q("textarea.reason"),
    select,
    force: q("input.force"),
    resolve: q("button.resolve"),
    deny: q("button.deny"),
    error: q(".error"),
  };
  entry.reason.addEventListener("input", () => refresh_buttons(entry));
  select.addEventListener("change", () => refresh_buttons(entry));
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
  // No arguments: the server takes the escalated decision's for the same tool.
  if (outcome === "execute") body.tool = entry.select.value;
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
  if (code === "ALREADY_RESOLVED") {
    // Someone was faster (and the socket has not told us yet): say who, and lock the card. The
    // existing resolution is in `detail` per docs/escalations.md; the message names it too.
    const existing = result.data.detail;
    if (existing && typeof existing === "object" && existing.reviewer) {
      const { who, what } = resolution_text(existing);
      show_card_error(entry, `Already resolved: ${who} ${what}.`);
    } else {
      show_card_error(entry, describe_error(result.status, result.data));
    }
    entry.card.classList.add("resolved");
  } else {
    show_card_error(entry, describe_error(result.status, result.data));
    if (code === "VERSION_CHANGED") $(".force-label", entry.card).hidden = false;
  }
  refresh_buttons(entry);
}

// ---- clocks ----------------------------------------------------------------------------------

function clock(ms) {
  const s = Math.floor(ms / 1000);
  return `${String(Math.floor(s / 60)).padStart(2, "0")}:${String(s % 60).padStart(2, "0")}`;
}

function tick() {
  const now = Date.now();
  for (const el of document.querySelectorAll(".countdown[data-deadline-ms]")) {
    const left = Number(el.dataset.deadlineMs) - now;
    el.textContent = left >= 0 ? clock(left) : `overdue ${clock(-left)}`;
    el.classList.toggle("soon", left >= 0 && left < 60000);
    el.closest(".card").classList.toggle("overdue", left < 0);
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
    key = "";
    $("#api-key").value = "";
    store_key("");
    replace_all([]);
    show_notice("");
    stop("idle", "no key: enter a reviewer key");
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
