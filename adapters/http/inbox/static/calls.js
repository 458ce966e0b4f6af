// Calls whose outcome is unknown (a reviewer settles them), and a call's story by its ids.
import { messageOf, request, send } from "./net.js";
import { byId, mayDecide } from "./state.js";
import { showJson, showText } from "./text.js";

export async function loadUnknown() {
  const note = byId("unknown-note");
  const list = byId("unknown");
  const answer = await request("GET", "/v1/calls?status=outcome_unknown");
  if (answer.unreachable) return; // the connection banner says it; keep what is shown
  list.replaceChildren();
  if (answer.status === 404 || answer.status === 405) {
    showText(note, "This service does not list calls.");
    return;
  }
  if (!answer.ok || !answer.data || !Array.isArray(answer.data.calls)) {
    showText(note, "Calls cannot be read now: " + messageOf(answer));
    return;
  }
  const more = answer.data.next_cursor ? "More wait than are shown; resolve these first." : "";
  showText(note, answer.data.calls.length ? more : "No call waits for a resolution.");
  for (const call of answer.data.calls) list.appendChild(callCard(call));
}

function callCard(call) {
  const element = byId("call-card").content.firstElementChild.cloneNode(true);
  const q = (selector) => element.querySelector(selector);
  showText(q(".tool"), call.tool);
  showText(q(".started"), call.started_at ? "started " + call.started_at : "");
  showText(q(".run"), call.run_id);
  showText(q(".call"), call.call_id);
  for (const status of ["succeeded", "failed"]) {
    const button = q("." + status);
    button.hidden = !mayDecide();
    button.setAttribute(
      "aria-label",
      (status === "succeeded" ? "It succeeded: " : "It failed: ") + call.tool + " for run " + call.run_id,
    );
    button.addEventListener("click", async () => {
      const answer = await send(
        "POST",
        "/v1/calls/resolve",
        { run_id: call.run_id, call_id: call.call_id, status },
        { "Idempotency-Key": crypto.randomUUID() },
      );
      if (!answer.ok) return showText(q(".error"), "Not recorded: " + messageOf(answer));
      showText(byId("status"), "Resolved " + call.tool + " as " + status);
      return loadUnknown();
    });
  }
  return element;
}

export async function showStory(event) {
  event.preventDefault();
  const note = byId("story-note");
  const out = byId("story");
  const query = new URLSearchParams({
    run_id: byId("story-run").value,
    call_id: byId("story-call").value,
  });
  const answer = await request("GET", "/v1/calls/story?" + query.toString());
  out.replaceChildren();
  if (!answer.ok) {
    const absent = answer.status === 404 && messageOf(answer) === "Not Found"; // no route
    showText(
      note,
      absent
        ? "This service does not tell call stories."
        : answer.status === 404
          ? "No such call here."
          : messageOf(answer),
    );
    return;
  }
  showText(note, "");
  showJson(out, answer.data);
}
