// Deciding from a card: approve (confirmed first when the tool's effect cannot be undone),
// reject with an optional reason, edit through the form the tool's schema gives, respond with
// a message. A decision replaces its card, in place, with a compact row saying what was
// recorded; focus moves on to the next card. Escape closes an editor or dialog and gives focus
// back to the button that opened it.
import { approvalPath, countRuns, forget, reveal, subject } from "./card.js";
import { messageOf, send } from "./net.js";
import { buildForm, readForm } from "./schema_form.js";
import { byId, state, uid } from "./state.js";
import { showText, showTime, showValue } from "./text.js";

const PAST = {
  approve: "Approved",
  reject: "Rejected",
  edit: "Edited",
  respond: "Answered",
};

export function wireDecisions(element, approval) {
  const q = (selector) => element.querySelector(selector);
  const what = subject(approval);
  const names = {
    approve: "Approve " + what,
    reject: "Reject " + what,
    edit: "Edit the arguments of " + what,
    respond: "Respond to " + what,
  };
  for (const button of element.querySelectorAll(".actions button")) {
    button.setAttribute("aria-label", names[button.dataset.kind]);
  }
  q(".approve").addEventListener("click", (event) => approve(element, event.currentTarget));
  q(".reject").addEventListener("click", (event) => rejectDialog(element, event.currentTarget));
  q(".edit").addEventListener("click", (event) => openEditor(element, "edit", event.currentTarget));
  q(".respond").addEventListener("click", (event) =>
    openEditor(element, "respond", event.currentTarget),
  );
  const editor = q(".editor");
  q(".editor .cancel").addEventListener("click", () => closeEditor(element));
  editor.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      closeEditor(element);
    }
  });
  editor.addEventListener("submit", (event) => {
    event.preventDefault();
    submitEditor(element);
  });
}

const approvalOf = (element) => state.cards.get(element.dataset.approvalId).approval;

// -- dialogs -------------------------------------------------------------------------------

// Opens `dialog` modal; resolves with true when its `.yes` is chosen. Escape, Cancel and
// closing give focus back to `opener`.
function ask(dialog, opener) {
  return new Promise((resolve) => {
    const yes = dialog.querySelector(".yes");
    const no = dialog.querySelector(".no");
    let answer = false;
    const onYes = (event) => {
      event.preventDefault();
      answer = true;
      dialog.close();
    };
    const onNo = () => dialog.close();
    const onClose = () => {
      yes.removeEventListener("click", onYes);
      no.removeEventListener("click", onNo);
      dialog.removeEventListener("close", onClose);
      if (!answer && opener.isConnected) opener.focus();
      resolve(answer);
    };
    yes.addEventListener("click", onYes);
    no.addEventListener("click", onNo);
    dialog.addEventListener("close", onClose);
    dialog.showModal();
  });
}

async function approve(element, opener) {
  const approval = approvalOf(element);
  if (approval.policy && approval.policy.irreversible) {
    const dialog = byId("confirm-dialog");
    showText(dialog.querySelector(".title"), "Approve " + subject(approval) + "?");
    const list = dialog.querySelector(".confirm-args");
    list.replaceChildren();
    const shown = state.revealed.get(approval.approval_id);
    for (const name of (approval.policy.headline || [])) {
      if (!shown || !(name in shown.args)) continue;
      const dt = document.createElement("dt");
      dt.textContent = name;
      const dd = document.createElement("dd");
      showValue(dd, shown.args[name]);
      list.append(dt, dd);
    }
    list.hidden = !list.children.length;
    showText(dialog.querySelector(".yes"), "Approve " + approval.tool);
    if (!(await ask(dialog, opener))) return;
  }
  await decide(element, { decision: "approve" });
}

async function rejectDialog(element, opener) {
  const approval = approvalOf(element);
  const dialog = byId("reject-dialog");
  showText(dialog.querySelector(".title"), "Reject " + subject(approval) + "?");
  const reason = byId("reject-reason");
  reason.value = "";
  if (!(await ask(dialog, opener))) return;
  const text = reason.value.trim();
  await decide(element, text ? { decision: "reject", reason: text } : { decision: "reject" });
}

// -- the editor ----------------------------------------------------------------------------

async function openEditor(element, kind, opener) {
  const approval = approvalOf(element);
  const editor = element.querySelector(".editor");
  const fields = editor.querySelector(".fields");
  showText(element.querySelector(".error"), "");
  editor.dataset.kind = kind;
  editor.opener = opener;
  if (kind === "edit") {
    // An edit names every argument: the sensitive ones too, so they are revealed first.
    let shown = state.revealed.get(approval.approval_id);
    const sensitive = (approval.policy && approval.policy.sensitive) || [];
    if (!shown || (!shown.sensitiveShown && (sensitive.length || shown.hidden.length))) {
      shown = await reveal(element, approval, sensitive.length > 0 || Boolean(shown && shown.hidden.length));
    }
    if (shown === null) return;
    showText(editor.querySelector(".editor-title"), "Edit the arguments of " + subject(approval));
    const policy = approval.policy || {};
    buildForm(fields, policy.args_schema, shown.args, policy.headline || []);
  } else {
    showText(editor.querySelector(".editor-title"), "Respond to " + subject(approval));
    const area = document.createElement("textarea");
    area.id = uid("respond");
    area.rows = 4;
    area.className = "message";
    const label = document.createElement("label");
    label.htmlFor = area.id;
    label.textContent = "Your answer to the agent (the tool does not run)";
    const field = document.createElement("div");
    field.className = "field";
    field.append(label, area);
    fields.replaceChildren(field);
  }
  editor.hidden = false;
  const first = fields.querySelector("input, select, textarea");
  if (first) first.focus();
}

function closeEditor(element) {
  const editor = element.querySelector(".editor");
  editor.hidden = true;
  showText(element.querySelector(".error"), "");
  if (editor.opener && editor.opener.isConnected) editor.opener.focus();
}

function submitEditor(element) {
  const approval = approvalOf(element);
  const editor = element.querySelector(".editor");
  const error = element.querySelector(".error");
  const fields = editor.querySelector(".fields");
  if (editor.dataset.kind === "respond") {
    const text = fields.querySelector("textarea").value;
    if (!text.trim()) return showText(error, "Write a message first; nothing was sent.");
    return decide(element, { decision: "respond", message: text });
  }
  let args;
  try {
    args = readForm(fields, approval.policy && approval.policy.args_schema);
  } catch (e) {
    return showText(error, "Not sent: " + e.message + ". Nothing was recorded.");
  }
  return decide(element, { decision: "edit", args });
}

// -- recording -----------------------------------------------------------------------------

// A decision whose answer never came (the connection dropped) may have been recorded: sent
// again, the same decision goes under the same request id, so the service answers it as
// recorded instead of refusing a second vote. Approval id -> {body, key}.
const unanswered = new Map();

function requestIdFor(approvalId, body) {
  const text = JSON.stringify(body);
  const earlier = unanswered.get(approvalId);
  const key = earlier && earlier.body === text ? earlier.key : crypto.randomUUID();
  unanswered.set(approvalId, { body: text, key });
  return key;
}

async function decide(element, body) {
  const known = state.cards.get(element.dataset.approvalId);
  if (!known || !element.isConnected) {
    // Its card went while a dialog was open: another reviewer decided it, or it was
    // withdrawn or expired. Nothing is sent.
    showText(byId("status"), "Not sent: that approval was closed meanwhile; nothing was recorded.");
    return;
  }
  const approval = known.approval;
  const error = element.querySelector(".error");
  showText(error, "");
  const buttons = element.querySelectorAll("button");
  for (const button of buttons) button.disabled = true;
  let answer;
  try {
    answer = await send(
      "POST",
      "/v1/approvals/" + encodeURIComponent(approval.approval_id) + "/decision",
      body,
      { "Idempotency-Key": requestIdFor(approval.approval_id, body) },
    );
  } finally {
    for (const button of buttons) button.disabled = false;
  }
  if (answer.unreachable) {
    showText(
      error,
      "The service cannot be reached, so whether this was recorded is not known. Send it " +
        "again once the service answers: it is recorded once.",
    );
    return;
  }
  unanswered.delete(approval.approval_id);
  if (!answer.ok) {
    const nothing = answer.status === 422 || answer.status === 403 ? " Nothing was recorded." : "";
    showText(error, "Not recorded: " + messageOf(answer) + "." + nothing);
    const focusable = element.querySelector(".editor:not([hidden]) input, .editor:not([hidden]) textarea");
    if (focusable) focusable.focus();
    return;
  }
  decidedInPlace(element, answer.data, body.decision, body.reason || null);
}

// Replaces the card with a compact row where it stood, and moves focus to the next card.
export function decidedInPlace(element, approval, kind, reason) {
  const row = decidedRow(approval, PAST[kind] || approval.status, reason);
  const cards = [...document.querySelectorAll("li.card[data-approval-id]")];
  const next = cards[cards.indexOf(element) + 1] || null;
  forget(element);
  state.cards.delete(element.dataset.approvalId);
  state.decided.add(approval.approval_id);
  element.replaceWith(row);
  const list = row.closest(".run-groups");
  if (list) countRuns(list);
  showText(byId("status"), "Recorded: " + (PAST[kind] || kind).toLowerCase() + " " + subject(approval) + ".");
  const target = next && next.isConnected ? next.querySelector(".actions button:not([hidden])") : null;
  (target || row).focus();
}

// `reason`: the one this page just sent, else the approval's where the caller may read it.
export function decidedRow(approval, said, reason = null) {
  const row = byId("decided-row").content.firstElementChild.cloneNode(true);
  row.dataset.approvalId = approval.approval_id;
  row.classList.add("status-" + approval.status);
  const q = (selector) => row.querySelector(selector);
  showText(q(".said"), said);
  const link = q("a.tool");
  showText(link, approval.tool);
  link.href = approvalPath(approval.approval_id);
  link.setAttribute("aria-label", "Open " + subject(approval));
  showText(q(".run"), approval.run_id);
  showText(q(".by"), (approval.decided_by || []).join(", ") || "—");
  showTime(q(".at"), approval.decided_at);
  const told = reason === null ? reasonOf(approval) : reason;
  q(".reason-part").hidden = told === null;
  showText(q(".reason"), told);
  return row;
}

// The final review's reason, where the service lets the caller read it (a reveal opens it).
export function reasonOf(approval) {
  const reviews = approval.reviews || [];
  const last = reviews[reviews.length - 1];
  return last && typeof last.reason === "string" ? last.reason : null;
}
