// Talking to the service: the /v1 API signed in by the session cookie, the live event stream,
// and the connection's state. When the service cannot be reached (a fetch that fails, a
// gateway's 502-504, the stream cut), the page says so and probes with a growing pause; once
// it answers, the page is told (`onReconnect`) and reads everything again.
import { CSRF_HEADER, byId, state } from "./state.js";

const FIRST_PAUSE = 500; // ms before the first probe; doubled up to MAX_PAUSE
const MAX_PAUSE = 8000;

const link = {
  lost: false,
  pause: FIRST_PAUSE,
  probing: false,
  waiters: [], // resolved when the service answers again
  onReconnect: () => {},
  onSessionEnded: () => {},
};

export function configure({ onReconnect, onSessionEnded }) {
  link.onReconnect = onReconnect;
  link.onSessionEnded = onSessionEnded;
}

export function isLost() {
  return link.lost;
}

function lost() {
  if (!link.lost) {
    link.lost = true;
    byId("connection").hidden = false;
    document.body.classList.add("offline");
  }
  if (!link.probing) probe();
}

function back() {
  if (!link.lost) return;
  link.lost = false;
  link.pause = FIRST_PAUSE;
  byId("connection").hidden = true;
  document.body.classList.remove("offline");
  for (const resolve of link.waiters.splice(0)) resolve();
  link.onReconnect();
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function probe() {
  link.probing = true;
  try {
    while (link.lost) {
      await sleep(link.pause);
      link.pause = Math.min(link.pause * 2, MAX_PAUSE);
      try {
        const answer = await fetch("/readyz", { cache: "no-store" });
        if (answer.ok) back();
      } catch (_) {
        // still unreachable: the next probe waits longer
      }
    }
  } finally {
    link.probing = false;
  }
}

function reachable() {
  return link.lost ? new Promise((resolve) => link.waiters.push(resolve)) : Promise.resolve();
}

const UNREACHABLE = { status: 0, ok: false, data: null, unreachable: true };

export async function request(method, path, body, headers) {
  const sent = { Accept: "application/json", ...(headers || {}) };
  if (body !== undefined) sent["Content-Type"] = "application/json";
  if (method !== "GET" && state.session) sent[CSRF_HEADER] = state.session.csrf_token;
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: sent,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
    });
  } catch (_) {
    lost();
    return UNREACHABLE;
  }
  if (response.status >= 502 && response.status <= 504) {
    lost();
    return { ...UNREACHABLE, status: response.status };
  }
  back();
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  return { status: response.status, ok: response.ok, data };
}

// An unsafe request: after a CSRF refusal (the service's key rotated), the session's CSRF
// token is asked for again and the request sent once more; a 401 ends the session.
export async function send(method, path, body, headers) {
  let answer = await request(method, path, body, headers);
  if (answer.status === 403 && messageOf(answer).includes(CSRF_HEADER)) {
    const session = await request("GET", "/inbox/session");
    if (session.ok) {
      state.session = session.data;
      answer = await request(method, path, body, headers);
    }
  }
  if (answer.status === 401) link.onSessionEnded();
  return answer;
}

export function messageOf(answer) {
  if (answer.unreachable) return "the service cannot be reached";
  if (answer.data && typeof answer.data.message === "string") return answer.data.message;
  return "the service answered " + answer.status;
}

// -- the live stream -----------------------------------------------------------------------

// Reads `/v1/approvals/events` while signed in; `changed` is called for each event and once
// per (re)connection (whatever happened while no stream was open).
export async function stream(changed) {
  const abort = new AbortController();
  state.streamAbort = abort;
  while (!abort.signal.aborted) {
    await reachable();
    let cut = false;
    try {
      const headers = { Accept: "text/event-stream" };
      if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
      const response = await fetch("/v1/approvals/events", {
        headers,
        credentials: "same-origin",
        cache: "no-store",
        signal: abort.signal,
      });
      if (response.status === 401) return link.onSessionEnded();
      if (response.status === 422) state.lastEventId = null; // an id from another journal
      if (response.ok) {
        back();
        changed();
        await readEvents(response.body, changed);
      } else {
        cut = response.status >= 500;
      }
    } catch (_) {
      cut = !abort.signal.aborted; // the service went away mid-stream, or never answered
    }
    if (cut) lost();
    else if (!abort.signal.aborted) await sleep(1000); // the service ended the stream
  }
}

async function readEvents(body, changed) {
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
      if (data) changed();
    }
  }
}
