// The Signoff inbox: the /v1 API, signed in by the session cookie, in plain JavaScript.
// Data from the service is only ever put in the page as text (textContent, text nodes),
// never as markup, and characters that do not show (zero-width, bidi controls, other
// format and control characters) are shown as their escapes.
"use strict";

(() => {
  const CSRF_HEADER = "X-CSRF-Token";
  const state = {
    session: null,
    cards: new Map(), // approval id -> {element, approval}
    revealed: new Map(), // approval id -> clear arguments
    lastEventId: null,
    streamAbort: null,
    refreshTimer: null,
    signingOut: false, // requests in flight then meet the ending session: no news
  };

  const byId = (id) => document.getElementById(id);

  // -- showing text ------------------------------------------------------------------------

  // Everything that does not show as itself, but an ordinary space and a line break.
  const INVISIBLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;

  function escapeOf(ch) {
    const cp = ch.codePointAt(0);
    const hex = cp.toString(16);
    return cp <= 0xffff ? "\\u" + hex.padStart(4, "0") : "\\u{" + hex + "}";
  }

  // Appends `text` to `element` as text, each invisible character as a marked escape.
  function appendVisible(element, text) {
    let plain = "";
    for (const ch of String(text)) {
      if (ch !== " " && ch !== "\n" && INVISIBLE.test(ch)) {
        if (plain) element.appendChild(document.createTextNode(plain));
        plain = "";
        const mark = document.createElement("span");
        mark.className = "invisible";
        mark.textContent = escapeOf(ch);
        mark.title = "a character that does not show: U+" + escapeOf(ch).replace(/\\u\{?|\}/g, "").toUpperCase();
        element.appendChild(mark);
      } else {
        plain += ch;
      }
    }
    if (plain) element.appendChild(document.createTextNode(plain));
  }

  // JSON text with every invisible character written as its JSON escape (\\uXXXX, one per
  // UTF-16 unit): the same value, and the editor shows what a textarea would hide.
  function visibleJson(value) {
    let out = "";
    for (const ch of JSON.stringify(value, null, 2)) {
      if (ch !== " " && ch !== "\n" && INVISIBLE.test(ch)) {
        for (let i = 0; i < ch.length; i += 1) {
          out += "\\u" + ch.charCodeAt(i).toString(16).padStart(4, "0");
        }
      } else {
        out += ch;
      }
    }
    return out;
  }

  function showText(element, text) {
    element.replaceChildren();
    appendVisible(element, text === null || text === undefined ? "" : text);
  }

  function showJson(element, value) {
    element.replaceChildren();
    appendVisible(element, JSON.stringify(value, null, 2));
    element.hidden = false;
  }

  function setStatus(text) {
    showText(byId("status"), text);
  }

  // -- talking to the service --------------------------------------------------------------

  async function request(method, path, body, headers) {
    const sent = { Accept: "application/json", ...(headers || {}) };
    if (body !== undefined) sent["Content-Type"] = "application/json";
    if (method !== "GET" && state.session) sent[CSRF_HEADER] = state.session.csrf_token;
    const response = await fetch(path, {
      method,
      headers: sent,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
    });
    let data = null;
    try {
      data = await response.json();
    } catch (_) {
      data = null;
    }
    return { status: response.status, ok: response.ok, data };
  }

  // An unsafe request: after a CSRF refusal (the service's key rotated), the session's
  // CSRF token is asked for again and the request sent once more; a 401 signs out.
  async function send(method, path, body, headers) {
    let answer = await request(method, path, body, headers);
    if (answer.status === 403 && messageOf(answer).includes(CSRF_HEADER)) {
      const session = await request("GET", "/inbox/session");
      if (session.ok) {
        state.session = session.data;
        answer = await request(method, path, body, headers);
      }
    }
    if (answer.status === 401) sessionEnded();
    return answer;
  }

  function messageOf(answer) {
    if (answer.data && typeof answer.data.message === "string") return answer.data.message;
    return "the service answered " + answer.status;
  }

  // -- signing in and out ------------------------------------------------------------------

  async function signIn(token) {
    showText(byId("sign-in-error"), "");
    const answer = await request("POST", "/inbox/session", { token });
    if (!answer.ok) {
      signedOut(answer.status === 401 ? "That token was refused." : messageOf(answer));
      return;
    }
    signedIn(answer.data);
  }

  function signedIn(session) {
    state.session = session;
    byId("token").value = "";
    byId("sign-in").hidden = true;
    byId("inbox").hidden = false;
    byId("who").hidden = false;
    showText(byId("who-name"), session.reviewer + (session.may_decide ? "" : " (auditor)"));
    byId("story-section").hidden = session.may_decide;
    setStatus("");
    loadApprovals();
    loadUnknown();
    stream();
  }

  function signedOut(message) {
    state.session = null;
    if (state.streamAbort) state.streamAbort.abort();
    state.streamAbort = null;
    state.cards.clear();
    state.revealed.clear();
    byId("approvals").replaceChildren();
    byId("unknown").replaceChildren();
    byId("inbox").hidden = true;
    byId("who").hidden = true;
    byId("sign-in").hidden = false;
    showText(byId("sign-in-error"), message || "");
  }

  // A 401: the session ended under the reviewer. Not when they are signing out or have signed
  // out: requests the page had in flight then meet the session they ended themselves.
  function sessionEnded() {
    if (state.session && !state.signingOut) signedOut("Your session ended; sign in again.");
  }

  // Only the service can drop the HttpOnly cookie: say "Signed out" only once it has.
  async function signOut() {
    state.signingOut = true;
    let answer;
    try {
      answer = await send("POST", "/inbox/session/end");
    } finally {
      state.signingOut = false;
    }
    if (!state.session) return; // signed out meanwhile (another tab's sign-in link, say)
    if (answer.status === 401) return signedOut("Your session ended; sign in again.");
    if (!answer.ok) return setStatus("Not signed out: " + messageOf(answer));
    signedOut("Signed out.");
  }

  // -- approvals ---------------------------------------------------------------------------

  async function loadApprovals() {
    const found = [];
    let cursor = null;
    for (let page = 0; page < 10; page += 1) {
      const query = "?limit=200" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
      const answer = await request("GET", "/v1/approvals" + query);
      if (answer.status === 401) return sessionEnded();
      if (!answer.ok) {
        showText(byId("approvals-note"), "Approvals cannot be read now: " + messageOf(answer));
        return;
      }
      found.push(...answer.data.approvals);
      cursor = answer.data.next_cursor;
      if (!cursor) break;
    }
    render(found);
  }

  function render(approvals) {
    const list = byId("approvals");
    const seen = new Set();
    for (const approval of approvals) {
      seen.add(approval.approval_id);
      const known = state.cards.get(approval.approval_id);
      if (known) {
        known.approval = approval;
        fillFacts(known.element, approval);
      } else {
        const element = card(approval);
        state.cards.set(approval.approval_id, { element, approval });
        list.appendChild(element);
      }
    }
    for (const [id, known] of state.cards) {
      if (!seen.has(id)) {
        known.element.remove();
        state.cards.delete(id);
      }
    }
    showText(byId("pending-count"), String(approvals.length));
    const note = approvals.length
      ? ""
      : state.session && state.session.may_decide
        ? "Nothing waits for your decision."
        : "Nothing is pending.";
    showText(byId("approvals-note"), note);
    tick();
  }

  // Who may decide, by the policy's tier (the API's `tier`).
  const TIERS = {
    self_confirm: "self-confirm: the person at the agent may confirm it; a listed reviewer may decide",
    four_eyes: "four-eyes: only an authenticated reviewer decides",
  };

  function fillFacts(element, approval) {
    const policy = approval.policy;
    const q = (selector) => element.querySelector(selector);
    showText(q(".tool"), approval.tool);
    showText(q(".description"), approval.description);
    showText(q(".run"), approval.run_id);
    showText(q(".call"), approval.call_id || "");
    showText(q(".requester"), approval.requested_by);
    showText(q(".tier"), TIERS[approval.tier] || approval.tier);
    const approvers = policy.approvers.length
      ? policy.approvers.join(", ")
      : "any reviewer in the directory";
    showText(
      q(".policy"),
      "approvers " + approvers + "; quorum " + policy.quorum +
        "; allows " + approval.allowed_decisions.join(", "),
    );
    showText(q(".votes"), approval.votes.approved_by.length + " of " + approval.votes.quorum);
    q(".expiry").dataset.expires = approval.expires_at || "";
  }

  function card(approval) {
    const element = byId("approval-card").content.firstElementChild.cloneNode(true);
    const id = approval.approval_id;
    element.dataset.approvalId = id;
    fillFacts(element, approval);
    const q = (selector) => element.querySelector(selector);
    const mayDecide = state.session && state.session.may_decide;
    if (state.revealed.has(id)) showArgs(element, state.revealed.get(id));
    for (const button of element.querySelectorAll(".actions button")) {
      button.hidden = !mayDecide || !approval.allowed_decisions.includes(button.dataset.kind);
    }
    q(".reveal").addEventListener("click", () => reveal(element, id));
    q(".approve").addEventListener("click", () => decide(element, id, { decision: "approve" }));
    q(".reject").addEventListener("click", () => decide(element, id, { decision: "reject" }));
    q(".edit").addEventListener("click", () => openEditor(element, id, "edit"));
    q(".respond").addEventListener("click", () => openEditor(element, id, "respond"));
    q(".editor .cancel").addEventListener("click", () => {
      q(".editor").hidden = true;
      showText(q(".error"), "");
    });
    q(".editor").addEventListener("submit", (event) => {
      event.preventDefault();
      submitEditor(element, id);
    });
    return element;
  }

  function showArgs(element, args) {
    element.querySelector(".reveal").hidden = true;
    showJson(element.querySelector(".args"), args);
  }

  async function reveal(element, id) {
    const answer = await send("POST", "/v1/approvals/" + encodeURIComponent(id) + "/reveal");
    if (!answer.ok) {
      showText(element.querySelector(".error"), "Not shown: " + messageOf(answer));
      return null;
    }
    state.revealed.set(id, answer.data.args);
    showArgs(element, answer.data.args);
    return answer.data.args;
  }

  async function openEditor(element, id, kind) {
    const editor = element.querySelector(".editor");
    const area = editor.querySelector("textarea");
    showText(element.querySelector(".error"), "");
    editor.dataset.kind = kind;
    if (kind === "edit") {
      const args = state.revealed.has(id) ? state.revealed.get(id) : await reveal(element, id);
      if (args === null) return;
      showText(editor.querySelector(".editor-label"), "The arguments to run instead (a JSON object)");
      area.value = visibleJson(args);
    } else {
      showText(editor.querySelector(".editor-label"), "Your answer to the agent (the tool does not run)");
      area.value = "";
    }
    editor.hidden = false;
    area.focus();
  }

  function submitEditor(element, id) {
    const editor = element.querySelector(".editor");
    const text = editor.querySelector("textarea").value;
    const error = element.querySelector(".error");
    if (editor.dataset.kind === "respond") {
      if (!text.trim()) return showText(error, "Write a message first.");
      return decide(element, id, { decision: "respond", message: text });
    }
    let args;
    try {
      args = JSON.parse(text);
    } catch (e) {
      return showText(error, "Not valid JSON, nothing was sent: " + e.message);
    }
    if (args === null || typeof args !== "object" || Array.isArray(args)) {
      return showText(error, "The arguments must be a JSON object; nothing was sent.");
    }
    return decide(element, id, { decision: "edit", args });
  }

  async function decide(element, id, body) {
    const error = element.querySelector(".error");
    showText(error, "");
    const buttons = element.querySelectorAll("button");
    for (const button of buttons) button.disabled = true;
    try {
      const answer = await send(
        "POST",
        "/v1/approvals/" + encodeURIComponent(id) + "/decision",
        body,
        { "Idempotency-Key": crypto.randomUUID() },
      );
      if (!answer.ok) {
        showText(error, "Not recorded: " + messageOf(answer));
        return;
      }
      element.querySelector(".editor").hidden = true;
      setStatus("Recorded: " + body.decision + " " + answer.data.tool + " (" + answer.data.status + ")");
      await loadApprovals();
    } finally {
      for (const button of buttons) button.disabled = false;
    }
  }

  // -- expiry countdowns -------------------------------------------------------------------

  function tick() {
    const now = Date.now();
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

  // -- live updates ------------------------------------------------------------------------

  function refreshSoon() {
    clearTimeout(state.refreshTimer);
    state.refreshTimer = setTimeout(() => {
      loadApprovals();
      loadUnknown(); // a call's outcome can become unknown when its approval is consumed
    }, 100);
  }

  async function stream() {
    const abort = new AbortController();
    state.streamAbort = abort;
    while (!abort.signal.aborted) {
      try {
        const headers = { Accept: "text/event-stream" };
        if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
        const response = await fetch("/v1/approvals/events", {
          headers,
          credentials: "same-origin",
          cache: "no-store",
          signal: abort.signal,
        });
        if (response.status === 401) return sessionEnded();
        if (response.status === 422) state.lastEventId = null; // an id from another journal
        if (response.ok) {
          refreshSoon(); // whatever happened while no stream was open
          await readEvents(response.body);
        }
      } catch (_) {
        // a cut connection: try again below
      }
      if (!abort.signal.aborted) await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }

  async function readEvents(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let data = false;
        for (const line of frame.split("\n")) {
          if (line.startsWith("id:")) state.lastEventId = line.slice(3).trim();
          if (line.startsWith("data:")) data = true;
        }
        if (data) refreshSoon();
      }
    }
  }

  // -- calls whose outcome is unknown, and a call's story ----------------------------------

  async function loadUnknown() {
    const note = byId("unknown-note");
    const list = byId("unknown");
    const answer = await request("GET", "/v1/calls?status=outcome_unknown");
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
    const mayDecide = state.session && state.session.may_decide;
    for (const status of ["succeeded", "failed"]) {
      const button = q("." + status);
      button.hidden = !mayDecide;
      button.addEventListener("click", async () => {
        const answer = await send(
          "POST",
          "/v1/calls/resolve",
          { run_id: call.run_id, call_id: call.call_id, status },
          { "Idempotency-Key": crypto.randomUUID() },
        );
        if (!answer.ok) return showText(q(".error"), "Not recorded: " + messageOf(answer));
        setStatus("Resolved " + call.tool + " as " + status);
        return loadUnknown();
      });
    }
    return element;
  }

  async function showStory(event) {
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

  // -- start -------------------------------------------------------------------------------

  async function start() {
    byId("sign-in-form").addEventListener("submit", (event) => {
      event.preventDefault();
      signIn(byId("token").value.trim());
    });
    byId("sign-out").addEventListener("click", signOut);
    byId("story-form").addEventListener("submit", showStory);
    setInterval(tick, 1000);
    // A link pasted into a tab already on the inbox changes only the fragment: no new load.
    window.addEventListener("hashchange", () => {
      if (/^#token=/.test(location.hash)) openSession();
    });
    await openSession();
  }

  // A sign-in link carries the token in the fragment (never sent to a server): read it once
  // and take it out of the address bar at once. Anyone can send such a link, so it never
  // replaces the session of a browser signed in already (login CSRF).
  async function openSession() {
    const link = /^#token=([^&]+)/.exec(location.hash);
    if (link) history.replaceState(null, "", location.pathname + location.search);
    const session = await request("GET", "/inbox/session");
    if (session.ok) {
      if (!state.session) signedIn(session.data);
      if (link) setStatus("You are signed in already: sign out first to use that sign-in link.");
      return;
    }
    if (!link) return signedOut("");
    let token = null;
    try {
      token = decodeURIComponent(link[1]);
    } catch (_) {
      return signedOut("That sign-in link is garbled.");
    }
    await signIn(token);
  }

  start();
})();
