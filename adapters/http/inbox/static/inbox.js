// The Signoff inbox: the /v1 API, signed in by the session cookie, in plain JavaScript
// modules (no build step). This one signs in and out, follows the address (filters in its
// query, one approval at /inbox/approvals/{id}) and keeps the page live.
import { loadUnknown, showStory } from "./calls.js";
import { configure, messageOf, request, send, stream } from "./net.js";
import { byId, state } from "./state.js";
import { showText } from "./text.js";
import { FILTERS, forgetHistoryPages, route, showView, tick } from "./views.js";

function setStatus(text) {
  showText(byId("status"), text);
}

// -- signing in and out --------------------------------------------------------------------

async function signIn(token) {
  showText(byId("sign-in-error"), "");
  const answer = await request("POST", "/inbox/session", { token });
  if (!answer.ok) {
    signedOut("", answer.status === 401 ? "That token was refused." : messageOf(answer));
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
  refresh();
  stream(refreshSoon);
}

// `note` is information ("Signed out."), `error` a problem ("That token was refused.").
function signedOut(note, error) {
  state.session = null;
  if (state.streamAbort) state.streamAbort.abort();
  state.streamAbort = null;
  state.cards.clear();
  state.revealed.clear();
  state.decided.clear();
  forgetHistoryPages();
  byId("approvals").replaceChildren();
  byId("history").replaceChildren();
  byId("detail").replaceChildren();
  delete byId("detail").dataset.shown;
  byId("unknown").replaceChildren();
  byId("inbox").hidden = true;
  byId("who").hidden = true;
  byId("sign-in").hidden = false;
  const target = route().approvalId;
  const opening = target && !note && !error ? "Sign in to open approval " + target + "." : "";
  showText(byId("sign-in-note"), note || opening);
  showText(byId("sign-in-error"), error || "");
}

// A 401: the session ended under the reviewer. Not when they are signing out or have signed
// out: requests the page had in flight then meet the session they ended themselves.
function sessionEnded() {
  if (state.session && !state.signingOut) signedOut("", "Your session ended; sign in again.");
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
  if (answer.status === 401) return signedOut("", "Your session ended; sign in again.");
  if (!answer.ok) return setStatus("Not signed out: " + messageOf(answer));
  signedOut("Signed out.", "");
}

// -- reading -------------------------------------------------------------------------------

function refresh() {
  if (!state.session) return;
  showView();
  if (!route().approvalId) loadUnknown(); // a call's outcome can become unknown when consumed
}

function refreshSoon() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(refresh, 100);
}

// -- the address ---------------------------------------------------------------------------

function go(path) {
  history.pushState(null, "", path);
  resetView();
  refresh();
}

function resetView() {
  forgetHistoryPages();
  state.cards.clear();
  state.decided.clear();
  byId("approvals").replaceChildren();
  byId("history").replaceChildren();
  byId("detail").replaceChildren();
  delete byId("detail").dataset.shown;
  document.title = "Signoff inbox";
  setStatus("");
}

function applyFilters(event) {
  event.preventDefault();
  const query = new URLSearchParams();
  for (const [name, id] of FILTERS) {
    const value = byId(id).value.trim();
    if (value && !(name === "status" && value === "pending")) query.set(name, value);
  }
  const text = query.toString();
  go("/inbox" + (text ? "?" + text : ""));
}

// Links inside the inbox change the view without loading the page again.
function follow(event) {
  const link = event.target.closest("a[href^='/inbox']");
  if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  go(link.getAttribute("href"));
}

// -- start ---------------------------------------------------------------------------------

async function start() {
  // Back after the service was away: read everything again, or the session if none was read.
  const reconnected = () => (state.session ? refreshSoon() : openSession());
  configure({ onReconnect: reconnected, onSessionEnded: sessionEnded });
  byId("sign-in-form").addEventListener("submit", (event) => {
    event.preventDefault();
    signIn(byId("token").value.trim());
  });
  byId("sign-out").addEventListener("click", signOut);
  byId("story-form").addEventListener("submit", showStory);
  byId("filters").addEventListener("submit", applyFilters);
  byId("f-status").addEventListener("change", applyFilters);
  document.addEventListener("click", follow);
  window.addEventListener("popstate", () => {
    resetView();
    refresh();
  });
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
  if (!link) return signedOut("", session.unreachable ? "The service cannot be reached." : "");
  let token = null;
  try {
    token = decodeURIComponent(link[1]);
  } catch (_) {
    return signedOut("", "That sign-in link is garbled.");
  }
  await signIn(token);
}

start();
