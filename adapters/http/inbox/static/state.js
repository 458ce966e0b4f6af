// What the inbox's modules share: the signed-in session, the cards on screen, the live stream.
export const CSRF_HEADER = "X-CSRF-Token";

export const state = {
  session: null, // {reviewer, scope, may_decide, csrf_token}
  cards: new Map(), // approval id -> {element, approval}
  revealed: new Map(), // approval id -> {args, hidden, context}
  decided: new Set(), // approval ids decided on this page: their rows stay where they were
  lastEventId: null,
  streamAbort: null,
  refreshTimer: null,
  signingOut: false, // requests in flight then meet the ending session: no news
};

export const byId = (id) => document.getElementById(id);

export function mayDecide() {
  return Boolean(state.session && state.session.may_decide);
}

let counter = 0;
// An id for a label's `for` and the control it names.
export function uid(prefix) {
  counter += 1;
  return prefix + "-" + counter;
}
