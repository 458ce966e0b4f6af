// What the page shows for its address: `/inbox?status=&tool=&run=&requested_by=` (pending
// approvals as cards grouped by run, or a history newest decision first), or
// `/inbox/approvals/{id}` (one approval, decided or not).
import {
  countRuns,
  fillFacts,
  forget,
  reveal,
  revealWhenSeen,
  runList,
  showArgs,
  subject,
  toggleStory,
} from "./card.js";
import { decidedRow, wireDecisions } from "./decide.js";
import { messageOf, request, send } from "./net.js";
import { byId, mayDecide, state } from "./state.js";
import { fillTime, showText } from "./text.js";

export const FILTERS = [
  ["status", "f-status"],
  ["tool", "f-tool"],
  ["run", "f-run"],
  ["requested_by", "f-requester"],
];

const STATUS_TITLES = {
  pending: "Pending approvals",
  decided: "Decided approvals",
  all: "Every approval",
};

export function route() {
  const match = /^\/inbox\/approvals\/([^/]+)$/.exec(location.pathname);
  if (match) {
    try {
      return { approvalId: decodeURIComponent(match[1]) };
    } catch (_) {
      return { approvalId: match[1] }; // a garbled escape: the service says there is no such one
    }
  }
  const query = new URLSearchParams(location.search);
  const filters = {};
  for (const [name] of FILTERS) {
    const value = (query.get(name) || "").trim();
    if (value) filters[name] = value;
  }
  return { filters };
}

// The listing API's query for `filters` (the page says `run`, the API `run_id`).
function apiQuery(filters, cursor) {
  const query = new URLSearchParams({ limit: "200" });
  if (filters.status) query.set("status", filters.status);
  if (filters.tool) query.set("tool", filters.tool);
  if (filters.run) query.set("run_id", filters.run);
  if (filters.requested_by) query.set("requested_by", filters.requested_by);
  if (cursor) query.set("cursor", cursor);
  return "/v1/approvals?" + query.toString();
}

export async function showView() {
  const where = route();
  byId("list-panel").hidden = Boolean(where.approvalId);
  byId("detail-panel").hidden = !where.approvalId;
  byId("filters").hidden = Boolean(where.approvalId);
  if (where.approvalId) {
    byId("unknown-section").hidden = true;
    return showDetail(where.approvalId);
  }
  for (const [name, id] of FILTERS) byId(id).value = where.filters[name] || (name === "status" ? "pending" : "");
  const status = where.filters.status || "pending";
  showText(byId("list-title"), STATUS_TITLES[status] || "Approvals " + status);
  byId("approvals").hidden = status !== "pending";
  byId("history").hidden = status === "pending";
  byId("unknown-section").hidden = status !== "pending";
  if (status === "pending") return loadPending(where.filters);
  return loadHistory(where.filters, null);
}

// -- pending, as cards ---------------------------------------------------------------------

async function loadPending(filters) {
  const found = [];
  let cursor = null;
  for (let page = 0; page < 10; page += 1) {
    const answer = await request("GET", apiQuery(filters, cursor));
    if (answer.unreachable) return; // the banner says it; what is shown stays
    if (!answer.ok) {
      showText(byId("approvals-note"), "Approvals cannot be read now: " + messageOf(answer));
      return;
    }
    found.push(...answer.data.approvals);
    cursor = answer.data.next_cursor;
    if (!cursor) break;
  }
  if (route().approvalId || (route().filters.status || "pending") !== "pending") return; // moved on
  renderCards(found);
}

function renderCards(approvals) {
  const container = byId("approvals");
  const seen = new Set();
  for (const approval of approvals) {
    seen.add(approval.approval_id);
    const known = state.cards.get(approval.approval_id);
    if (known) {
      known.approval = approval;
      fillFacts(known.element, approval);
    } else {
      runList(container, approval.run_id).appendChild(card(approval));
    }
  }
  for (const [id, known] of state.cards) {
    if (!seen.has(id) && !byId("approvals").hidden) {
      forget(known.element);
      known.element.remove();
      state.cards.delete(id);
    }
  }
  countRuns(container);
  const waiting = approvals.length;
  showText(byId("list-count"), String(waiting));
  const note = waiting
    ? ""
    : mayDecide()
      ? "Nothing waits for your decision."
      : "Nothing is pending.";
  showText(byId("approvals-note"), note);
  tick();
}

export function card(approval) {
  const element = byId("approval-card").content.firstElementChild.cloneNode(true);
  const id = approval.approval_id;
  element.dataset.approvalId = id;
  state.cards.set(id, { element, approval });
  fillFacts(element, approval);
  const q = (selector) => element.querySelector(selector);
  const decides = mayDecide();
  for (const button of element.querySelectorAll(".actions button")) {
    button.hidden = !decides || !approval.allowed_decisions.includes(button.dataset.kind);
  }
  wireDecisions(element, approval);
  const current = () => state.cards.get(id).approval;
  q(".reveal").setAttribute("aria-label", "Show the arguments of " + subject(approval));
  q(".reveal").addEventListener("click", () => reveal(element, current()));
  q(".show-sensitive").addEventListener("click", () => reveal(element, current(), true));
  const story = q(".show-story");
  story.hidden = !approval.call_id;
  story.setAttribute("aria-label", "The story of the call of " + subject(approval));
  story.addEventListener("click", () =>
    toggleStory(element, approval.run_id, approval.call_id, story),
  );
  if (state.revealed.has(id)) showArgs(element, approval, state.revealed.get(id));
  else if (decides) revealWhenSeen(element); // a reviewer the policy admits reads them inline
  q(".reveal").hidden = decides || state.revealed.has(id);
  q(".args-wait").hidden = !decides || state.revealed.has(id);
  return element;
}

// -- history, as rows ----------------------------------------------------------------------

// How many pages of history the reviewer has read: a live refresh reads as many again, so
// that news never takes away the rows they had scrolled to.
let historyPages = 1;

export function forgetHistoryPages() {
  historyPages = 1;
}

async function loadHistory(filters, cursor) {
  const list = byId("history");
  const more = byId("more");
  const rows = [];
  let next = cursor;
  for (let page = 0; page < (cursor ? 1 : historyPages); page += 1) {
    const answer = await request("GET", apiQuery(filters, next));
    if (answer.unreachable) return;
    if (!answer.ok) {
      showText(byId("approvals-note"), "Approvals cannot be read now: " + messageOf(answer));
      return;
    }
    rows.push(...answer.data.approvals.map(historyRow));
    next = answer.data.next_cursor;
    if (!next) break;
  }
  if (cursor) {
    list.append(...rows);
    historyPages += 1;
  } else {
    list.replaceChildren(...rows);
  }
  const shown = list.children.length;
  showText(byId("list-count"), String(shown) + (next ? "+" : ""));
  showText(byId("approvals-note"), shown ? "" : "Nothing here matches.");
  more.hidden = !next;
  more.onclick = () => loadHistory(filters, next);
}

function historyRow(approval) {
  if (approval.status !== "pending") return decidedRow(approval, approval.status);
  const row = decidedRow(approval, "pending");
  row.querySelector(".decided-part").hidden = true;
  return row;
}

// -- one approval --------------------------------------------------------------------------

async function showDetail(id) {
  const box = byId("detail");
  const note = byId("detail-note");
  const answer = await request("GET", "/v1/approvals/" + encodeURIComponent(id));
  if (answer.unreachable) return;
  if (!answer.ok) {
    box.replaceChildren();
    showText(
      note,
      answer.status === 404
        ? "There is no approval " + id + "."
        : answer.status === 403
          ? "This approval's policy does not admit you."
          : "This approval cannot be read now: " + messageOf(answer),
    );
    return;
  }
  const approval = answer.data;
  showText(note, "");
  showText(byId("detail-title"), "Approval of " + subject(approval));
  document.title = approval.tool + " — Signoff inbox";
  const known = state.cards.get(id);
  if (approval.status === "pending" && !state.decided.has(id)) {
    if (known && known.element.isConnected && box.contains(known.element)) {
      known.approval = approval;
      fillFacts(known.element, approval);
    } else {
      const list = document.createElement("ol");
      list.className = "cards";
      list.appendChild(card(approval));
      box.replaceChildren(list);
    }
    tick();
    return;
  }
  if (state.decided.has(id) && box.querySelector("li.decided")) return; // decided here: stays
  const version = id + "@" + approval.version;
  if (box.dataset.shown === version) return; // unchanged: keep what the reviewer opened
  box.dataset.shown = version;
  // A reviewer reads what was decided (the reject reason, an answer) as a card's arguments:
  // through a recorded reveal, once per approval.
  let shown = approval;
  if (mayDecide()) {
    const path = "/v1/approvals/" + encodeURIComponent(id) + "/reveal";
    // Its own request id: what was decided is more than the card showed, and is journaled so.
    const key = "inbox-view-decided:" + id;
    const opened = await send("POST", path, undefined, { "Idempotency-Key": key });
    if (opened.ok) shown = opened.data;
  }
  const told = byId("decided-detail").content.firstElementChild.cloneNode(true);
  told.querySelector("ol.rows").appendChild(decidedRow(shown, approval.status));
  const last = (shown.reviews || [])[(shown.reviews || []).length - 1];
  const reply = told.querySelector(".answer");
  reply.hidden = !(last && typeof last.message === "string");
  if (!reply.hidden) showText(reply.querySelector(".message"), last.message);
  const story = told.querySelector(".show-story");
  story.hidden = !approval.call_id;
  story.setAttribute("aria-label", "The story of the call of " + subject(approval));
  story.addEventListener("click", () => toggleStory(told, approval.run_id, approval.call_id, story));
  box.replaceChildren(told);
}

// -- expiry countdowns and relative times --------------------------------------------------

export function tick() {
  const now = Date.now();
  for (const time of document.querySelectorAll("time[data-relative]")) fillTime(time);
  for (const { element } of state.cards.values()) {
    const expiry = element.querySelector(".expiry");
    const at = expiry.dataset.expires;
    if (!at) {
      showText(expiry, "no expiry");
      continue;
    }
    const left = Math.round((Date.parse(at) - now) / 1000);
    if (left <= 0) {
      showText(expiry, "expired");
      expiry.classList.add("late");
      continue;
    }
    const h = Math.floor(left / 3600);
    const m = Math.floor((left % 3600) / 60);
    const s = left % 60;
    showText(expiry, "expires in " + (h ? h + "h " : "") + (h || m ? m + "m " : "") + s + "s");
    expiry.classList.toggle("soon", left < 300);
  }
}
