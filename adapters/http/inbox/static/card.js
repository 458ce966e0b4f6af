// One approval as a card: what is asked (headline fields large, the other arguments inline,
// sensitive ones behind a click), why (the agent's reason, the user's last message), who
// asked and when, who decides (in plain words) and until when. Cards of one run sit under
// that run's header, in a colour of their own.
import { messageOf, send } from "./net.js";
import { byId, state } from "./state.js";
import { showText, showTime, showValue } from "./text.js";

const HUES = 8;

// Who may decide, by the policy's tier (the API's `tier`).
const TIERS = {
  self_confirm: "self-confirm: the person at the agent may confirm it; a listed reviewer may decide",
  four_eyes: "four-eyes: only an authenticated reviewer decides",
};
const TIER_BADGES = { self_confirm: "self-confirm", four_eyes: "four-eyes" };

// Runs take the colours in the order the page meets them: two runs next to each other never
// share one (a hash of the id would, one time in eight).
const hues = new Map();
export function hueOf(runId) {
  if (!hues.has(runId)) hues.set(runId, "hue-" + (hues.size % HUES));
  return hues.get(runId);
}

export function subject(approval) {
  return approval.tool + " for run " + approval.run_id;
}

export const approvalPath = (id) => "/inbox/approvals/" + encodeURIComponent(id);

// The list of `runId`'s cards in `container`, made with its header when new.
export function runList(container, runId) {
  for (const group of container.querySelectorAll("section.run")) {
    if (group.dataset.runId === runId) return group.querySelector("ol.cards");
  }
  const group = byId("run-group").content.firstElementChild.cloneNode(true);
  group.dataset.runId = runId;
  group.classList.add(hueOf(runId));
  const heading = group.querySelector(".run-id");
  showText(heading, runId);
  const only = group.querySelector("a.only-run");
  only.href = "/inbox?run=" + encodeURIComponent(runId);
  only.setAttribute("aria-label", "Show only run " + runId);
  container.appendChild(group);
  return group.querySelector("ol.cards");
}

export function countRuns(container) {
  for (const group of container.querySelectorAll("section.run")) {
    const count = group.querySelectorAll("li.card").length;
    if (!group.querySelector("li")) {
      group.remove();
      continue;
    }
    showText(group.querySelector(".run-count"), count === 1 ? "1 waiting" : count + " waiting");
  }
}

export function fillFacts(element, approval) {
  const q = (selector) => element.querySelector(selector);
  const policy = approval.policy || {};
  showText(q(".tool"), approval.tool);
  showText(q(".description"), approval.description);
  showText(q(".tier-badge"), TIER_BADGES[approval.tier] || approval.tier);
  q(".irreversible").hidden = !policy.irreversible;
  showText(q(".run"), approval.run_id);
  showText(q(".call"), approval.call_id || "—");
  showText(q(".requester"), approval.requested_by);
  showText(q(".tier"), TIERS[approval.tier] || approval.tier);
  showText(q(".policy"), approval.policy_text || "");
  showTime(q(".requested"), approval.requested_at);
  const votes = approval.votes;
  for (const part of element.querySelectorAll(".votes-row")) part.hidden = !votes || votes.quorum <= 1;
  if (votes) showText(q(".votes"), votes.approved_by.length + " of " + votes.quorum);
  const expiry = q(".expiry");
  expiry.dataset.expires = approval.expires_at || "";
  showTime(q(".expires"), approval.expires_at);
  q(".open").href = approvalPath(approval.approval_id);
  q(".open").setAttribute("aria-label", "Open " + subject(approval) + " on its own page");
}

// -- arguments -----------------------------------------------------------------------------

function field(list, name, value, className) {
  const dt = document.createElement("dt");
  dt.textContent = name;
  const dd = document.createElement("dd");
  dd.dataset.field = name;
  if (className) dd.className = className;
  showValue(dd, value);
  list.append(dt, dd);
}

// Shows what a reveal gave: headline fields large, the rest inline, hidden ones behind a
// button. The policy's sensitive fields stay hidden here whatever the answer holds.
export function showArgs(element, approval, shown) {
  const policy = approval.policy || {};
  const sensitive = new Set(policy.sensitive || []);
  const headline = (policy.headline || []).filter((name) => name in shown.args);
  const open = shown.sensitiveShown;
  const q = (selector) => element.querySelector(selector);
  const big = q("dl.headline");
  const rest = q("dl.args");
  big.replaceChildren();
  rest.replaceChildren();
  const hidden = new Set(shown.hidden || []);
  for (const name of headline) {
    if (sensitive.has(name) && !open) hidden.add(name);
    else field(big, name, shown.args[name], "big");
  }
  for (const [name, value] of Object.entries(shown.args)) {
    if (headline.includes(name)) continue;
    if (sensitive.has(name) && !open) hidden.add(name);
    else field(rest, name, value, sensitive.has(name) ? "sensitive" : "");
  }
  big.hidden = !big.children.length;
  rest.hidden = !rest.children.length;
  const more = q("button.show-sensitive");
  more.hidden = open || hidden.size === 0;
  if (!more.hidden) {
    const names = [...hidden].join(", ");
    showText(more, "Show sensitive fields (" + names + ")");
    more.setAttribute("aria-label", "Show sensitive fields " + names + " of " + subject(approval));
  }
  q("button.reveal").hidden = true;
  q(".args-wait").hidden = true;
  showContext(element, shown.context);
}

function showContext(element, context) {
  const box = element.querySelector(".context");
  const reason = context && typeof context.reason === "string" ? context.reason : null;
  const said = context && typeof context.last_user_message === "string" ? context.last_user_message : null;
  box.querySelector(".reason-row").hidden = reason === null;
  box.querySelector(".said-row").hidden = said === null;
  showText(box.querySelector(".reason"), reason);
  showText(box.querySelector(".said"), said);
  box.hidden = reason === null && said === null;
}

// Reveals the arguments (journaled by the service). One key per approval and kind of view,
// so a reload, or a second tab, records nothing new.
export async function reveal(element, approval, sensitive = false) {
  const id = approval.approval_id;
  const path =
    "/v1/approvals/" + encodeURIComponent(id) + "/reveal" + (sensitive ? "?sensitive=true" : "");
  const key = (sensitive ? "inbox-view-sensitive:" : "inbox-view:") + id;
  const answer = await send("POST", path, undefined, { "Idempotency-Key": key });
  if (!answer.ok) {
    showText(element.querySelector(".error"), "Arguments not shown: " + messageOf(answer));
    return null;
  }
  const data = answer.data;
  const shown = {
    args: data.args || {},
    hidden: Array.isArray(data.hidden_fields) ? data.hidden_fields : [],
    context: data.context || null,
    sensitiveShown: sensitive,
  };
  state.revealed.set(id, shown);
  if (element.isConnected) showArgs(element, approval, shown);
  return shown;
}

// Reveals a reviewer's cards as they come on screen: one request per card seen, none for
// cards scrolled past unseen.
const watcher =
  typeof IntersectionObserver === "function"
    ? new IntersectionObserver((entries) => {
        for (const entry of entries) {
          if (!entry.isIntersecting) continue;
          watcher.unobserve(entry.target);
          const known = state.cards.get(entry.target.dataset.approvalId);
          if (known && !state.revealed.has(known.approval.approval_id)) {
            reveal(known.element, known.approval);
          }
        }
      })
    : null;

export function revealWhenSeen(element) {
  if (watcher) watcher.observe(element);
}

export function forget(element) {
  if (watcher) watcher.unobserve(element);
}

// -- a call's story ------------------------------------------------------------------------

export async function toggleStory(container, runId, callId, button) {
  const out = container.querySelector(".story");
  const note = container.querySelector(".story-note");
  if (!out.hidden) {
    out.hidden = true;
    button.setAttribute("aria-expanded", "false");
    return;
  }
  const query = new URLSearchParams({ run_id: runId, call_id: callId });
  const answer = await send("GET", "/v1/calls/story?" + query.toString());
  button.setAttribute("aria-expanded", "true");
  if (!answer.ok) {
    showText(
      note,
      answer.status === 404 ? "No call recorded yet: the tool has not run." : messageOf(answer),
    );
    note.hidden = false;
    return;
  }
  note.hidden = true;
  out.replaceChildren();
  const told = [...(answer.data.approval_events || []), ...(answer.data.events || [])];
  told.sort((a, b) => a.position - b.position);
  for (const event of told) {
    const item = document.createElement("li");
    const when = document.createElement("span");
    showTime(when, event.recorded_at || null);
    const what = document.createElement("strong");
    what.textContent = event.type;
    item.append(what, " ", when);
    if (event.actor) item.append(" by ", event.actor);
    out.appendChild(item);
  }
  out.hidden = false;
  showText(note, "");
}
